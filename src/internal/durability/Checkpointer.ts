/**
 * WAL checkpoints of a SQLite database file on a worker thread with a connection of its own.
 * better-sqlite3 is synchronous, so SQLite's automatic checkpoint (run by the commit that grows the
 * WAL past 1,000 pages) stalls the event loop while it copies the log into the database file and
 * syncs it: tens of milliseconds for every session of the process at once. With the store's
 * automatic checkpoint off, this module asks a worker to run a `PASSIVE` checkpoint (it never blocks
 * writers) whenever about `everyPages` WAL pages were written since the last one (SQLite's default
 * automatic checkpoint runs at 1,000). The worker starts with the first checkpoint; if it fails,
 * `fallback` runs once (the store turns SQLite's automatic checkpoint back on).
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect, Queue } from "effect"
import * as NodeModule from "node:module"
import { Worker } from "node:worker_threads"

/**
 * Counts what the store wrote and asks for checkpoints.
 *
 * @since 0.1.0
 * @category models
 */
export interface Checkpointer {
  /** Called after each committed transaction with the bytes of the rows it wrote. */
  readonly wrote: (bytes: number) => void
  /** Checkpoints the worker completed (for tests). */
  readonly completed: () => number
}

// Row bytes per WAL page written: a 4 KiB page of the table and about half a page of index per page.
const PAGE_SHARE = 2730

// CommonJS, evaluated in the worker; the driver's path comes from the main thread's resolution.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads")
const Database = require(workerData.driver)
const db = new Database(workerData.filename)
parentPort.on("message", (message) => {
  if (message === "close") {
    db.close()
    parentPort.close()
    return
  }
  try {
    db.pragma("wal_checkpoint(PASSIVE)")
    parentPort.postMessage("done")
  } catch (error) {
    parentPort.postMessage(String(error))
  }
})
`

// This module's file: `import.meta.url` in an ES module; a CommonJS bundle of tiller has no
// `import.meta` (esbuild leaves it empty) but has `__filename`.
const thisModule = (): string => typeof __filename === "string" ? __filename : import.meta.url

/**
 * A checkpointer for `filename`, stopped (its worker closed) with the scope. `workerSource` is the
 * worker's CommonJS source (replaced only to test failures).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  filename: string,
  fallback: Effect.Effect<void>,
  everyPages = 1000,
  workerSource = WORKER_SOURCE
): Effect.Effect<Checkpointer, never, Scope.Scope> =>
  Effect.gen(function*() {
    // The worker reports a failure from its own callbacks; one fiber of the scope runs `fallback`.
    const failures = yield* Queue.dropping<void>(1)
    yield* Effect.forkScoped(Effect.zipRight(Queue.take(failures), fallback))
    let worker: Worker | undefined
    let failed = false
    let closing = false
    let inFlight = false
    let pending = 0
    let completed = 0

    const fail = () => {
      if (failed || closing) return
      failed = true
      void worker?.terminate()
      worker = undefined
      Queue.unsafeOffer(failures, undefined)
    }

    const start = (): Worker | undefined => {
      try {
        const driver = NodeModule.createRequire(thisModule()).resolve("better-sqlite3")
        const started = new Worker(workerSource, { eval: true, workerData: { driver, filename } })
        started.unref()
        started.on("message", (message) => {
          inFlight = false
          if (message === "done") completed++
          else fail()
        })
        started.on("error", fail)
        started.on("exit", () => {
          if (!closing) fail()
        })
        return started
      } catch {
        fail()
        return undefined
      }
    }

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closing = true
        const stopping = worker
        worker = undefined
        if (stopping === undefined) return Effect.void
        return Effect.async<void>((resume) => {
          // Referenced again while it closes: otherwise a process with nothing else to do would
          // exit before this finalizer completes.
          stopping.ref()
          stopping.once("exit", () => resume(Effect.void))
          stopping.postMessage("close")
        })
      })
    )

    return {
      wrote: (bytes) => {
        if (failed || closing) return
        // A transaction writes its rows' table and index pages and a page or two of bookkeeping.
        pending += 2 + Math.ceil(bytes / PAGE_SHARE)
        if (pending < everyPages || inFlight) return
        worker ??= start()
        if (worker === undefined) return
        pending = 0
        inFlight = true
        worker.postMessage("checkpoint")
      },
      completed: () => completed
    }
  })
