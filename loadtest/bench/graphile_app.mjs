// graphile-worker beside fleet: the worker process `python -m loadtest.bench` starts (copied next to
// the graphile-worker it installed with npm, so that `import "graphile-worker"` finds it).
//
//   node graphile_app.mjs migrate   install graphile-worker's schema and exit
//   node graphile_app.mjs run       serve the bench's tasks until SIGTERM
//
// Environment: DATABASE_URL; GW_WORKER (JSON: the preset's `worker` options, e.g. concurrentJobs,
// maxPoolSize, localQueue, completeJobBatchDelay); GW_CRONTAB (a crontab, optional); BENCH_READY
// (a file written once the worker runs); BENCH_WINDOW (a file written at SIGTERM: jobs run, first
// handler start and last handler end, Unix seconds); BENCH_STAMPS (lines "slot start" appended by
// the `stamp` and `at` tasks as their first act, as loadtest/bench/stamps.py reads them).
import { appendFileSync, writeFileSync } from "node:fs";
import { run, runMigrations } from "graphile-worker";

const now = () => (performance.timeOrigin + performance.now()) / 1000;
const stamp = (slot) => {
  const at = now();
  if (process.env.BENCH_STAMPS) {
    appendFileSync(process.env.BENCH_STAMPS, `${slot.toFixed(6)} ${at.toFixed(6)}\n`);
  }
};

let count = 0;
let first = 0;
let last = 0;

const taskList = {
  // A no-op job of the drain: only its window is kept, in memory.
  noop: async () => {
    const start = now();
    if (count === 0) first = start;
    count += 1;
    last = now();
  },
  // A job due at `payload.at` (Unix seconds): the herd.
  at: async (payload) => stamp(payload.at),
  // The crontab's recurring job: its slot is the `_cron.ts` graphile-worker hands it.
  stamp: async (payload) => stamp(Date.parse(payload._cron.ts) / 1000),
};

const connectionString = process.env.DATABASE_URL;
const mode = process.argv[2];
if (mode === "migrate") {
  await runMigrations({ connectionString });
} else if (mode === "run") {
  const worker = JSON.parse(process.env.GW_WORKER || "{}");
  const runner = await run({
    connectionString,
    noHandleSignals: true,
    taskList,
    crontab: process.env.GW_CRONTAB || "",
    preset: { worker },
  });
  if (process.env.BENCH_READY) writeFileSync(process.env.BENCH_READY, `${process.pid}\n`);
  let stopping = false;
  process.on("SIGTERM", async () => {
    if (stopping) return;
    stopping = true;
    if (process.env.BENCH_WINDOW) {
      writeFileSync(process.env.BENCH_WINDOW, `${count} ${first.toFixed(6)} ${last.toFixed(6)}\n`);
    }
    await runner.stop();
    process.exit(0);
  });
  await runner.promise;
} else {
  console.error(`graphile_app.mjs: mode: expected migrate or run, got ${mode}`);
  process.exit(2);
}
