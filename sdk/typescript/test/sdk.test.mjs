// The SDK's own tests (node --test), against the built package in dist/.
import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";

import { createHandler, defineJob, execute, Flare, indexEntry, NonRetriableError, serve, serveFetch, sign, StepError, toMs, verify } from "../dist/index.js";
import { runJob } from "../dist/testing.js";

const SECRET = "whsec_ZmxhcmUtZW5kcG9pbnQtZG9jcy1leGFtcGxlLWtleSE=";

const request = (steps = {}, job = "onboard") => ({
  action: "run",
  protocol: 2,
  run: { id: "run_1", attempt: 1, maxAttempts: 3 },
  job: { id: job, version: "1.0.0" },
  event: { id: "evt_1", name: "user.created", payload: { email: "ada@example.com" } },
  steps,
});

let accounts = 0;
const onboard = defineJob({ id: "onboard", trigger: { event: "user.created" } }, async ({ event, step, logger }) => {
  logger.info("start");
  const account = await step.run("create-account", () => {
    accounts += 1;
    return { id: "a_1", email: event.payload.email };
  });
  const plan = await step.run("pick-plan", () => "free");
  await step.sleep("a-day-later", "1d");
  logger.info("after the sleep");
  const sent = await step.sendEvent("notify", { name: "user.onboarded", payload: { id: account.id } });
  return { account: account.id, plan, sent: sent.ids };
});

test("the worked example of docs/endpoints.md verifies", async () => {
  const body = '{"action":"index"}';
  assert.equal(await sign(SECRET, "msg_2f1c7b9e4a8d0356", 1717171717, body), "v1,JX3TgSCyryPPV0rp5x/lz2JM5/JeGDsQWGTdZN7nhGM=");
  const headers = { "webhook-id": "msg_2f1c7b9e4a8d0356", "webhook-timestamp": "1717171717", "webhook-signature": "v0,x v1,JX3TgSCyryPPV0rp5x/lz2JM5/JeGDsQWGTdZN7nhGM=" };
  await verify(SECRET, headers, body, 1717171717);
  await verify(["whsec_b3RoZXI=", SECRET], headers, body, 1717171717 + 299);
  await assert.rejects(verify(SECRET, headers, body, 1717171717 + 301), /within 5 minutes/);
  await assert.rejects(verify(SECRET, headers, body + " ", 1717171717), /no webhook-signature entry matches/);
  await assert.rejects(verify(SECRET, { ...headers, "webhook-id": null }, body, 1717171717), /missing/);
});

test("a call runs new steps until one suspends, replaying stored ones", async () => {
  accounts = 0;
  const first = await execute(onboard, request());
  assert.deepEqual(first.steps, [
    { key: "create-account", op: "run", output: { id: "a_1", email: "ada@example.com" } },
    { key: "pick-plan", op: "run", output: "free" },
    { key: "a-day-later", op: "sleep", durationMs: 86_400_000 },
  ]);
  assert.equal("output" in first, false);
  assert.deepEqual(first.logs, [{ level: "info", message: "start" }]);
  const stored = { "create-account": { output: { id: "a_1" } }, "pick-plan": { output: "free" }, "a-day-later": { output: null } };
  const second = await execute(onboard, request(stored));
  assert.deepEqual(second.steps, [{ key: "notify", op: "sendEvent", events: [{ name: "user.onboarded", payload: { id: "a_1" } }] }]);
  assert.deepEqual(second.logs, [{ level: "info", message: "after the sleep" }], "replayed lines are not sent again");
  const third = await execute(onboard, request({ ...stored, notify: { output: { ids: ["run_1-notify-0"] } } }));
  assert.deepEqual(third, { output: { account: "a_1", plan: "free", sent: ["run_1-notify-0"] } });
  assert.equal(accounts, 1, "a stored step is not run again");
});

test("a failed step is reported with the error; a failed stored step runs again", async () => {
  let tries = 0;
  const job = defineJob({ id: "flaky", trigger: { event: "a.b" } }, async ({ step }) => {
    await step.run("one", () => 1);
    return step.run("two", () => {
      tries += 1;
      if (tries === 1) throw new Error("carrier down");
      return "ok";
    });
  });
  const a = await execute(job, request({}, "flaky"));
  assert.deepEqual(a, { steps: [{ key: "one", op: "run", output: 1 }, { key: "two", op: "run", error: "carrier down" }], error: "carrier down" });
  const b = await execute(job, request({ one: { output: 1 }, two: { error: "carrier down" } }, "flaky"));
  assert.deepEqual(b, { steps: [{ key: "two", op: "run", output: "ok" }], output: "ok" });
  const fatal = defineJob({ id: "fatal", trigger: { event: "a.b" } }, () => {
    throw new NonRetriableError("no such user");
  });
  assert.deepEqual(await execute(fatal, request({}, "fatal")), { error: "no such user", retry: false });
});

test("changed code and reused keys fail the run without retry", async () => {
  const job = defineJob({ id: "changed", trigger: { event: "a.b" } }, async ({ step }) => {
    await step.run("renamed", () => 1);
    return 1;
  });
  const a = await execute(job, request({ original: { output: 1 } }, "changed"));
  assert.equal(a.retry, false);
  assert.match(a.error, /code changed.*"original" is stored but was not reached/);
  const twice = defineJob({ id: "twice", trigger: { event: "a.b" } }, async ({ step }) => {
    await step.run("a", () => 1);
    await step.run("a", () => 2);
  });
  const b = await execute(twice, request({}, "twice"));
  assert.equal(b.retry, false);
  assert.match(b.error, /used twice/);
  // Returning early with stored steps left over is changed code too.
  const early = defineJob({ id: "early", trigger: { event: "a.b" } }, async () => 1);
  assert.match((await execute(early, request({ x: { output: 1 } }, "early"))).error, /"x" is stored/);
});

test("a full answer ends before the next new step, which runs in the next call", async () => {
  const many = defineJob({ id: "many", trigger: { event: "a.b" } }, async ({ step }) => {
    let sum = 0;
    for (let i = 0; i < 150; i++) sum += await step.run(`s${i}`, () => i);
    return sum;
  });
  const first = await execute(many, request({}, "many"));
  assert.equal(first.steps.length, 100);
  assert.equal("output" in first, false);
  const r = await runJob(many, { event: { payload: null } });
  assert.equal(r.output, 11175);
  const big = defineJob({ id: "big", trigger: { event: "a.b" } }, async ({ step }) => {
    for (let i = 0; i < 3; i++) await step.run(`b${i}`, () => "x".repeat(300 * 1024));
    return "done";
  });
  assert.equal((await execute(big, request({}, "big"))).steps.length, 2, "past 512 KiB the answer goes");
});

test("runJob runs a job to its end with mocked steps", async () => {
  accounts = 0;
  const r = await runJob(onboard, { event: { payload: { email: "b@example.com" } }, steps: { "create-account": { id: "a_mock" } } });
  assert.equal(accounts, 0, "the mocked step did not run");
  assert.deepEqual(r.output, { account: "a_mock", plan: "free", sent: ["run_test-notify-0"] });
  assert.deepEqual(r.sleeps, [{ key: "a-day-later", durationMs: 86_400_000 }]);
  assert.deepEqual(r.events, [{ name: "user.onboarded", payload: { id: "a_mock" } }]);
  assert.deepEqual(r.steps.map((s) => s.key), ["pick-plan", "a-day-later", "notify"]);
  assert.deepEqual(r.logs.map((l) => l.message), ["start", "after the sleep"]);
});

async function signedPost(url, body, secret = SECRET) {
  const id = "msg_test";
  const ts = Math.floor(Date.now() / 1000);
  const headers = { "content-type": "application/json", "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": await sign(secret, id, ts, body) };
  return fetch(url, { method: "POST", headers, body });
}

test("waitForEvent suspends with the wait, then returns the stored event or null", async () => {
  const job = defineJob({ id: "pay", trigger: { event: "invoice.created" } }, async ({ step }) => {
    await step.run("create", () => "inv");
    const paid = await step.waitForEvent("paid", { event: "invoice.paid", match: "payload.invoiceId", if: "async.payload.amount >= 10", timeout: "3d" });
    const other = await step.waitForEvent("other", { event: "invoice.sent", timeout: 1000 });
    return { paid: paid?.payload ?? null, other };
  });
  const a = await execute(job, request({}, "pay"));
  assert.deepEqual(a, {
    steps: [
      { key: "create", op: "run", output: "inv" },
      { key: "paid", op: "waitForEvent", event: "invoice.paid", match: "payload.invoiceId", if: "async.payload.amount >= 10", timeoutMs: 259_200_000 },
    ],
  });
  const event = { id: "evt_9", name: "invoice.paid", payload: { invoiceId: "in_1", amount: 12 }, timestamp: "2030-01-01T00:00:00Z" };
  const b = await execute(job, request({ create: { output: "inv" }, paid: { output: event } }, "pay"));
  assert.deepEqual(b, { steps: [{ key: "other", op: "waitForEvent", event: "invoice.sent", timeoutMs: 1000 }] });
  const c = await execute(job, request({ create: { output: "inv" }, paid: { output: event }, other: { output: null } }, "pay"));
  assert.deepEqual(c, { output: { paid: { invoiceId: "in_1", amount: 12 }, other: null } });
  const bad = defineJob({ id: "bad", trigger: { event: "a.b" } }, ({ step }) => step.waitForEvent("w", { event: "", timeout: 1 }));
  assert.match((await execute(bad, request({}, "bad"))).error, /options\.event/);

  // runJob: an unmocked wait times out; a mocked one resumes with its event.
  const timedOut = await runJob(job, { event: { payload: {} } });
  assert.deepEqual(timedOut.output, { paid: null, other: null });
  assert.deepEqual(timedOut.waits.map((w) => w.key), ["paid", "other"]);
  const resumed = await runJob(job, { event: { payload: {} }, steps: { paid: event } });
  assert.deepEqual(resumed.output, { paid: { invoiceId: "in_1", amount: 12 }, other: null });
});

const double = defineJob({ id: "double", trigger: { event: "never.sent" } }, ({ event }) => ({ n: event.payload.n * 2 }));
const boom = defineJob({ id: "boom", trigger: { event: "never.sent" } }, () => {
  throw new NonRetriableError("boom went the child");
});
const parent = defineJob({ id: "parent", trigger: { event: "parent.start" } }, async ({ event, step }) => {
  await step.run("before", () => 1);
  try {
    const got = await step.invoke("call", { job: event.payload.job === "boom" ? boom : "double", payload: { n: 21 }, timeout: "1h" });
    return { got };
  } catch (e) {
    if (!(e instanceof StepError)) throw e;
    return { failed: e.message, key: e.key };
  }
});

test("invoke suspends with the child to run, then returns its output or throws its error as a StepError", async () => {
  const a = await execute(parent, request({}, "parent"));
  assert.deepEqual(a, {
    steps: [
      { key: "before", op: "run", output: 1 },
      { key: "call", op: "invoke", job: "double", payload: { n: 21 }, timeoutMs: 3_600_000 },
    ],
  });
  const b = await execute(parent, request({ before: { output: 1 }, call: { output: { n: 42 } } }, "parent"));
  assert.deepEqual(b, { output: { got: { n: 42 } } });
  const c = await execute(parent, request({ before: { output: 1 }, call: { error: 'invoke "call": run run_2 failed: boom' } }, "parent"));
  assert.deepEqual(c, { output: { failed: 'invoke "call": run run_2 failed: boom', key: "call" } });
  // Not caught, the step error fails the attempt (retried by the job's policy).
  const uncaught = defineJob({ id: "uncaught", trigger: { event: "a.b" } }, ({ step }) => step.invoke("call", { job: "double", timeout: 1000 }));
  assert.deepEqual(await execute(uncaught, request({ call: { error: "the child failed" } }, "uncaught")), { error: "the child failed" });
  assert.deepEqual((await execute(uncaught, request({}, "uncaught"))).steps, [{ key: "call", op: "invoke", job: "double", payload: null, timeoutMs: 1000 }]);
  const noJob = defineJob({ id: "nojob", trigger: { event: "a.b" } }, ({ step }) => step.invoke("call", { job: "", timeout: 1 }));
  assert.match((await execute(noJob, request({}, "nojob"))).error, /options\.job/);

  // runJob: a job given in `jobs` runs; a mocked step returns its result; failSteps throws.
  const ran = await runJob(parent, { event: { payload: {} }, jobs: [double] });
  assert.deepEqual(ran.output, { got: { n: 42 } });
  assert.deepEqual(ran.invokes, [{ key: "call", job: "double", payload: { n: 21 }, timeoutMs: 3_600_000 }]);
  const failed = await runJob(parent, { event: { payload: { job: "boom" } }, jobs: [double, boom] });
  assert.match(failed.output.failed, /boom went the child/);
  const mocked = await runJob(parent, { event: { payload: {} }, steps: { call: { n: 1 } } });
  assert.deepEqual(mocked.output, { got: { n: 1 } });
  assert.deepEqual(mocked.invokes, []);
  const forced = await runJob(parent, { event: { payload: {} }, failSteps: { call: "the child timed out" } });
  assert.deepEqual(forced.output, { failed: "the child timed out", key: "call" });
  const missing = await runJob(parent, { event: { payload: {} } });
  assert.match(missing.output.failed, /neither mocked nor given to runJob/);
  const failedStep = await runJob(parent, { event: { payload: {} }, failSteps: { before: "down" }, jobs: [double] });
  assert.equal(failedStep.error, "down");
  assert.deepEqual(failedStep.steps, [{ key: "before", op: "run", error: "down" }]);
});

const approve = defineJob({ id: "approve", trigger: { event: "approval.asked" } }, async ({ step, logger }) => {
  const cb = await step.callback("ask", { timeout: "1d" });
  logger.info("made", { url: cb.url });
  const mailed = await step.run("mail", () => cb.url);
  const answer = await step.waitForCallback(cb);
  return { answer, mailed, deadline: cb.deadline };
});

test("callback is made, told with its URL, then waited for", async () => {
  const a = await execute(approve, request({}, "approve"));
  assert.deepEqual(a, { steps: [{ key: "ask", op: "callback", timeoutMs: 86_400_000 }] });
  const callback = { token: "cb_1", path: "/callbacks/cb_1", deadline: "2030-01-02T00:00:00.000Z" };
  const b = await execute(approve, request({ ask: { callback } }, "approve"), { baseUrl: "https://flare.example.com/" });
  assert.deepEqual(b, {
    steps: [
      { key: "mail", op: "run", output: "https://flare.example.com/callbacks/cb_1" },
      { key: "ask", op: "waitForCallback" },
    ],
    logs: [{ level: "info", message: "made", fields: { url: "https://flare.example.com/callbacks/cb_1" } }],
  });
  const stored = { ask: { callback, output: { approved: true } }, mail: { output: "https://flare.example.com/callbacks/cb_1" } };
  const c = await execute(approve, request(stored, "approve"));
  assert.deepEqual(c, { output: { answer: { approved: true }, mailed: "https://flare.example.com/callbacks/cb_1", deadline: "2030-01-02T00:00:00.000Z" } });
  // Past its deadline Flare no longer knows the token: the wait returns null.
  const late = await execute(approve, request({ ask: { callback: { deadline: callback.deadline }, output: null }, mail: { output: "u" } }, "approve"));
  assert.deepEqual(late, { output: { answer: null, mailed: "u", deadline: callback.deadline } });

  const stray = defineJob({ id: "stray", trigger: { event: "a.b" } }, ({ step }) => step.waitForCallback({ key: "nowhere", token: "", path: "", url: "", deadline: "" }));
  const d = await execute(stray, request({}, "stray"));
  assert.equal(d.retry, false);
  assert.match(d.error, /wait for what step\.callback returned/);

  // runJob: an unmocked callback times out; a mocked one resumes with its body.
  const timedOut = await runJob(approve, { event: { payload: {} }, baseUrl: "http://flare.test" });
  assert.equal(timedOut.output.answer, null);
  assert.equal(timedOut.output.mailed, "http://flare.test/callbacks/cb_test_ask");
  assert.deepEqual(timedOut.callbacks, [{ key: "ask", url: "http://flare.test/callbacks/cb_test_ask", timeoutMs: 86_400_000 }]);
  const answered = await runJob(approve, { event: { payload: {} }, steps: { ask: { approved: true } }, baseUrl: "http://flare.test" });
  assert.deepEqual(answered.output.answer, { approved: true });
  assert.equal(answered.output.mailed, "http://flare.test/callbacks/cb_test_ask");
});

test("flow control settings go to the index", () => {
  const job = defineJob(
    {
      id: "limited",
      trigger: { event: "a.b" },
      concurrency: [{ limit: 1, key: "event.payload.customerId" }, { limit: 10, group: "openai" }],
      throttle: { limit: 10, periodMs: 60_000, burst: 2 },
      rateLimit: { limit: 1, periodMs: 3_600_000, key: "event.payload.userId" },
      startTimeoutMs: 60_000,
    },
    () => null,
  );
  assert.deepEqual(indexEntry(job), {
    id: "limited",
    name: "limited",
    version: "1.0.0",
    trigger: { event: "a.b" },
    concurrency: [{ limit: 1, key: "event.payload.customerId" }, { limit: 10, group: "openai" }],
    throttle: { limit: 10, periodMs: 60_000, burst: 2 },
    rateLimit: { limit: 1, periodMs: 3_600_000, key: "event.payload.userId" },
    startTimeoutMs: 60_000,
  });
});

test("debounce, priority and cancelOn go to the index", () => {
  const job = defineJob(
    {
      id: "edits",
      trigger: { event: "doc.edited" },
      debounce: { periodMs: 5_000, key: "event.payload.docId", timeoutMs: 60_000 },
      priority: { run: "event.payload.plan == 'enterprise' ? 120 : 0" },
      cancelOn: [{ event: "doc.deleted", match: "payload.docId" }],
    },
    () => null,
  );
  const entry = indexEntry(job);
  assert.deepEqual(entry.debounce, { periodMs: 5_000, key: "event.payload.docId", timeoutMs: 60_000 });
  assert.deepEqual(entry.priority, { run: "event.payload.plan == 'enterprise' ? 120 : 0" });
  assert.deepEqual(entry.cancelOn, [{ event: "doc.deleted", match: "payload.docId" }]);
});

test("serve() answers index and run over node:http, and refuses unsigned requests", async () => {
  const server = http.createServer(serve({ jobs: [onboard], secret: SECRET }));
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}/flare`;
  try {
    const index = await (await signedPost(url, '{"action":"index"}')).json();
    assert.deepEqual(index, { protocol: 2, jobs: [{ id: "onboard", name: "onboard", version: "1.0.0", trigger: { event: "user.created" } }] });
    const run = await (await signedPost(url, JSON.stringify(request({}, "nope")))).json();
    assert.deepEqual(run, { error: 'this endpoint serves no job "nope"', retry: false });
    const unsigned = await fetch(url, { method: "POST", body: "{}" });
    assert.equal(unsigned.status, 401);
    assert.equal((await signedPost(url, '{"action":"index"}', "whsec_b3RoZXI=")).status, 401);
  } finally {
    server.close();
  }
});

test("serveFetch() is a Request → Response handler", async () => {
  const handler = serveFetch({ jobs: [onboard], secret: SECRET });
  const body = JSON.stringify(request());
  const id = "msg_f";
  const ts = Math.floor(Date.now() / 1000);
  const res = await handler(new Request("http://x/flare", { method: "POST", body, headers: { "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": await sign(SECRET, id, ts, body) } }));
  assert.equal(res.status, 200);
  assert.equal((await res.json()).steps.length, 3);
  assert.equal((await handler(new Request("http://x/flare"))).status, 405);
  assert.throws(() => createHandler({ jobs: [onboard, onboard], secret: SECRET }), /used twice/);
});

test("the client sends events with an id, a delay and deliverAt", async () => {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ auth: req.headers.authorization, url: req.url, body: JSON.parse(body) });
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ success: true, result: { id: "evt_9", name: "a.b", runIds: [] }, duplicate: false }));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  try {
    const flare = new Flare({ baseUrl: `http://127.0.0.1:${server.address().port}/`, apiKey: "k" });
    const sent = await flare.send("a.b", { n: 1 }, { id: "order-1", delay: "1h30m" });
    assert.equal(sent.event.id, "evt_9");
    await flare.send("a.b", null, { deliverAt: new Date("2030-01-01T09:00:00Z") });
    assert.deepEqual(seen[0], { auth: "Bearer k", url: "/trigger", body: { event: "a.b", payload: { n: 1 }, delay: "1h30m", id: "order-1" } });
    assert.deepEqual(seen[1].body, { event: "a.b", payload: null, deliverAt: "2030-01-01T09:00:00.000Z" });
  } finally {
    server.close();
  }
});

test("durations", () => {
  assert.equal(toMs(1500), 1500);
  assert.equal(toMs("1h30m"), 5_400_000);
  assert.equal(toMs("3d"), 259_200_000);
  assert.equal(toMs("250ms"), 250);
  assert.throws(() => toMs("soon"), /invalid duration/);
});

test("serve() is an Express handler, also after express.raw()", async () => {
  const { default: express } = await import("express");
  const app = express();
  app.post("/flare", serve({ jobs: [onboard], secret: SECRET }));
  app.post("/raw", express.raw({ type: "application/json" }), serve({ jobs: [onboard], secret: SECRET }));
  app.post("/parsed", express.json(), serve({ jobs: [onboard], secret: SECRET }));
  const server = app.listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    for (const path of ["/flare", "/raw"]) {
      const res = await signedPost(`${base}${path}`, JSON.stringify(request()));
      assert.equal(res.status, 200, path);
      assert.equal((await res.json()).steps.length, 3, path);
    }
    const parsed = await signedPost(`${base}/parsed`, '{"action":"index"}');
    assert.equal(parsed.status, 500);
    assert.match((await parsed.json()).error, /express\.json\(\)/);
  } finally {
    server.close();
  }
});
