/**
 * Counts the Effect operations and fibers that one W1 step costs, with a `Supervisor` under
 * `OpSupervision`: unlike a timing, the count is the same on a busy machine, so it shows whether a
 * change to the loop made a step cheaper. `npm run bench:ops [-- STEPS]`; it runs W1 (memory store)
 * with `ScriptedModel` and with the minimal model for STEPS and 2 x STEPS steps and prints the
 * difference per step.
 *
 * @since 0.1.0
 */
import { Effect, RuntimeFlags, RuntimeFlagsPatch, Supervisor } from "effect"
import type { ModelKind } from "./loop.js"
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
const counted = (n: number, kind: ModelKind) =>
  w1Run(n, kind).pipe(
    Effect.supervised(counter),
    Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision))
  )

const perStep = (kind: ModelKind, label: string) =>
  Effect.gen(function*() {
    yield* counted(20, kind) // warm-up
    const a = { ops: counter.ops, fibers: counter.fibers }
    yield* counted(steps, kind)
    const b = { ops: counter.ops, fibers: counter.fibers }
    yield* counted(2 * steps, kind)
    const c = { ops: counter.ops, fibers: counter.fibers }
    // The two runs share every fixed cost (opening, closing), so their difference is `steps` steps.
    const per = (k: "ops" | "fibers") => ((c[k] - b[k]) - (b[k] - a[k])) / steps
    console.log(
      `W1 step (${label}, memory store): ${per("ops").toFixed(0)} Effect operations, ${per("fibers").toFixed(1)} fibers`
    )
  })

const main = Effect.gen(function*() {
  yield* perStep("scripted", "ScriptedModel")
  yield* perStep("direct", "minimal model")
})

Effect.runPromise(main)
