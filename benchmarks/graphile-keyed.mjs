// graphile-worker's answer to a concurrency limit of 1 per key: jobs with a `queueName` run one at
// a time per queue name. Drains N jobs spread over KEYS queue names (KEYS=0: no queue name, the
// plain drain) with a worker of CONCURRENCY, as the peers' own drain phase does, and prints one
// JSON line in the peers' format. Run through benchmarks/peers.sh (PEERS="graphile-keyed"), which
// copies this file next to the peers' node_modules; compare with `flare bench drain --keys`.
// Env: PGURL (default postgres://postgres@127.0.0.1:5432/bench_graphile), KEYS (10000), and the
// peers' knobs (N, CONCURRENCY, DRAIN_TIMEOUT_S).
import { run, makeWorkerUtils, Logger } from "graphile-worker";
import pg from "pg";
import { cfg, emit, log, pkgVersion, makeCounter, measureDrain } from "./lib/common.mjs";

const PGURL = process.env.PGURL || "postgres://postgres@127.0.0.1:5432/bench_graphile";
const KEYS = Number.parseInt(process.env.KEYS ?? "10000", 10);
const SCHEMA = "graphile_worker";

const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile-worker ${level}] ${message}`);
});
const counter = makeCounter();
const taskList = { noop: async () => counter.hit() };

async function main() {
  const admin = new pg.Pool({ connectionString: PGURL, max: 2 });
  await admin.query(`drop schema if exists ${SCHEMA} cascade`);
  const utils = await makeWorkerUtils({ connectionString: PGURL, maxPoolSize: 4, logger });
  await utils.migrate();
  log(`seeding ${cfg.n} jobs over ${KEYS || "no"} queue names`);
  for (let from = 0; from < cfg.n; from += 1000) {
    const k = Math.min(1000, cfg.n - from);
    await utils.addJobs(
      Array.from({ length: k }, (_, j) => ({
        identifier: "noop",
        payload: {},
        ...(KEYS > 0 ? { queueName: `k${(from + j) % KEYS}` } : {}),
      })),
    );
  }
  await admin.query("vacuum analyze");
  log("drain");
  const { res, handle } = await measureDrain(cfg.n, counter, () =>
    run({
      connectionString: PGURL,
      concurrency: cfg.concurrency,
      maxPoolSize: cfg.concurrency + 2,
      noHandleSignals: true,
      logger,
      taskList,
    }),
  );
  await handle.stop();
  await utils.release();
  await admin.end();
  emit({
    peer: "graphile-worker",
    version: pkgVersion("graphile-worker"),
    variant: KEYS > 0 ? `queue_name over ${KEYS} keys` : "no queue_name",
    n: cfg.n,
    concurrency: cfg.concurrency,
    ...res,
  });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
