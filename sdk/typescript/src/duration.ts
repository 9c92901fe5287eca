/** Durations as the protocol and Flare's API take them. */

import type { Duration } from "./job.js";

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Milliseconds of `d`: a number of ms, or text such as `"90s"`, `"1h30m"`, `"3d"`. */
export function toMs(d: Duration): number {
  if (typeof d === "number") {
    if (!Number.isFinite(d) || d < 0) throw new Error(`invalid duration ${d}: use a number of ms >= 0`);
    return Math.round(d);
  }
  const text = d.trim();
  const re = /\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    total += Number(m[1]) * (UNITS[m[2] as string] as number);
    end = re.lastIndex;
  }
  if (text.length === 0 || end !== text.length) {
    throw new Error(`invalid duration ${JSON.stringify(d)}: use e.g. "90s", "15m", "2h", "3d", "1h30m"`);
  }
  return Math.round(total);
}
