/**
 * Counts the Effect operations and fibers that one W1 step costs, with a `Supervisor` under
 * `OpSupervision`: unlike a timing, the count is the same on a busy machine, so it shows whether a
 * change to the loop made a step cheaper. `npm run bench:ops [-- STEPS]`; it runs W1 (the
 * minimal model, memory store) for STEPS and 2 x STEPS steps and prints the difference per step.
 *
 * @since 0.1.0
 */
import { Effect, RuntimeFlags, RuntimeFlagsPatch, Supervisor } from "effect"
import { w1Run } from "./loop.js"

const steps = Number(process.argv[2] ?? 200)

class Counter extends Supervisor.AbstractSupervisor<void> {
  ops = 0
  fibers = 0
  readonly value = Effect.void
  override onStart() {
    this.fibers++
  }
  override onEffect() {
    this.ops++
  }
}

const counter = new Counter()
const counted = (n: number) =>
  w1Run(n, "direct").pipe(
    Effect.supervised(counter),
    Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision))
  )

const main = Effect.gen(function*() {
  yield* counted(20) // warm-up
  const a = { ops: counter.ops, fibers: counter.fibers }
  yield* counted(steps)
  const b = { ops: counter.ops, fibers: counter.fibers }
  yield* counted(2 * steps)
  const c = { ops: counter.ops, fibers: counter.fibers }
  // The two runs share every fixed cost (opening, closing), so their difference is `steps` steps.
  const per = (k: "ops" | "fibers") => ((c[k] - b[k]) - (b[k] - a[k])) / steps
  console.log(`W1 step (minimal model, memory store): ${per("ops").toFixed(0)} Effect operations, ${per("fibers").toFixed(1)} fibers`)
})

Effect.runPromise(main)
