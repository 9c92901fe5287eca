// Flare dashboard: live refresh. Every 2 s, while the tab is visible and "live" is ticked, the
// page is fetched again and each region marked data-live is replaced by its fresh version, so new
// events and state changes appear without a reload. Nothing runs while a form field has focus.
// A page answering a form (a replay whose payload was refused) names the URL to refetch in
// data-live-url, since its own URL only takes the POST.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var busy = false;
  var toggle = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");

  function editing() {
    var el = document.activeElement;
    if (!el) return false;
    if (el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && el.type !== "checkbox" && el.type !== "submit";
  }

  function tick() {
    var regions = document.querySelectorAll("[data-live]");
    if (!regions.length || busy || document.hidden || editing()) return;
    if (toggle && !toggle.checked) return;
    busy = true;
    var marked = document.querySelector("[data-live-url]");
    var url = marked ? marked.getAttribute("data-live-url") : window.location.href;
    fetch(url, { credentials: "same-origin", headers: { "X-Flare-Live": "1" } })
      .then(function (res) {
        if (res.redirected || !res.ok) throw new Error("HTTP " + res.status);
        return res.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        regions.forEach(function (region) {
          var next = fresh.getElementById(region.id);
          if (next && next.innerHTML !== region.innerHTML) region.innerHTML = next.innerHTML;
        });
        // UTC, as every time on the pages (the browser's zone would disagree with them).
        if (status) status.textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
      })
      .catch(function (err) {
        if (status) status.textContent = "offline (" + err.message + ")";
      })
      .then(function () { busy = false; });
  }

  window.setInterval(tick, PERIOD_MS);
})();
