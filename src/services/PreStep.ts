/**
 * PreStep: the waterfall that decides each step's batch of user messages (SPEC 4.4, 8.6).
 *
 * @since 0.1.0
 */
import { Cause, Context, Effect, Layer, Option } from "effect"
import type { Scope } from "effect"
import { PreStepFailed, PreStepRejected } from "../domain/Errors.js"
import type { PreStepInput } from "../domain/Seams.js"
import { enteredByDefault, PreStepDecision } from "../domain/Seams.js"
import type { UserMessage } from "../domain/Values.js"
import { reportDefects } from "../internal/loop/Activity.js"
import * as Waterfall from "../internal/loop/Waterfall.js"

export type { PreStepInput } from "../domain/Seams.js"
export { enteredByDefault, PreStepDecision } from "../domain/Seams.js"

/**
 * A pre-step listener; `next` yields the downstream decision and may be called at most once.
 *
 * @since 0.1.0
 * @category models
 */
export type PreStepListener<E> = (
  input: PreStepInput,
  next: () => Effect.Effect<PreStepDecision, PreStepFailed>
) => Effect.Effect<PreStepDecision, E>

/**
 * Options of {@link PreStep} registration.
 *
 * @since 0.1.0
 * @category models
 */
export interface PreStepRegisterOptions {
  readonly prepend?: boolean
}

type Registry = Waterfall.Waterfall<PreStepInput, PreStepDecision, PreStepFailed>

/**
 * Builds a pre-step service over a fresh, empty listener list.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Context.Tag.Service<PreStep>> = Effect.map(
  Waterfall.make<PreStepInput, PreStepDecision, PreStepFailed>(),
  (registry) => {
    const service: Context.Tag.Service<PreStep> = {
      register: <E>(listener: PreStepListener<E>, options?: PreStepRegisterOptions) =>
        registry.register(guard(listener), options),
      // Untraced: it runs at every step boundary, and a span costs more than the waterfall itself.
      run: (input: PreStepInput) => runRegistry(registry, input),
      isQuiet: registry.isEmpty
    }
    return service
  }
)

/**
 * The pre-step waterfall of one agent: listeners decide each step's batch.
 *
 * @since 0.1.0
 * @category tags
 */
export class PreStep extends Context.Tag("tiller/PreStep")<PreStep, {
  /** Adds a listener for the lifetime of the current scope (outermost first; `prepend` puts it first). */
  readonly register: <E>(
    listener: PreStepListener<E>,
    options?: PreStepRegisterOptions
  ) => Effect.Effect<void, never, Scope.Scope>
  /** Runs the waterfall over one claimed batch: the messages to enter, or `PreStepRejected` / `PreStepFailed`. */
  readonly run: (input: PreStepInput) => Effect.Effect<ReadonlyArray<UserMessage>, PreStepRejected | PreStepFailed>
  /**
   * Whether no listener is registered now, so `run` would only enter the batch: the loop then
   * enters it inline instead of racing `run` against a cancel. A service without it is always run.
   */
  readonly isQuiet?: () => boolean
}>() {
  /**
   * A pre-step service with its own listener list (fresh per layer build).
   *
   * @since 0.1.0
   */
  static readonly layer: Layer.Layer<PreStep> = Layer.effect(PreStep, make)
}

const runRegistry = (
  registry: Registry,
  input: PreStepInput
): Effect.Effect<ReadonlyArray<UserMessage>, PreStepRejected | PreStepFailed> =>
  Effect.suspend(() => {
    const { turn, step } = input
    // Listeners see copies: a fresh frozen array of deep-frozen messages, never the caller's objects.
    const seen: PreStepInput = Object.freeze({
      sessionId: input.sessionId,
      turn,
      step,
      boundary: input.boundary,
      messages: enteredByDefault(input.messages)
    })
    return Effect.flatMap(
      registry.run(seen, (i) => Effect.succeed(PreStepDecision.enter(Object.freeze(i.messages.slice())))),
      (decision): Effect.Effect<ReadonlyArray<UserMessage>, PreStepRejected | PreStepFailed> => {
        switch (decision?._tag) {
          case "Enter":
            return Effect.succeed(decision.messages)
          case "Reject":
            return Effect.fail(
              new PreStepRejected(
                decision.reason === undefined ? { turn, step } : { turn, step, reason: decision.reason }
              )
            )
          default:
            return Effect.fail(
              new PreStepFailed({
                turn,
                step,
                cause: new Error(`a pre-step decision must be Enter or Reject, got ${String(decision)}`)
              })
            )
        }
      }
    )
  })

// Wraps a listener so that its own failures and defects become `PreStepFailed`. A `PreStepFailed`
// that came out of this invocation's `next()` passes through unchanged, so failures never nest.
// Interruption is never caught: an interrupted fiber skips failure handlers, and an interrupt-only
// cause is re-raised as is.
const guard =
  <E>(listener: PreStepListener<E>): Waterfall.Listener<PreStepInput, PreStepDecision, PreStepFailed> =>
  (input, next) =>
    Effect.suspend(() => {
      let downstream: PreStepFailed | undefined
      const trackedNext = () =>
        Effect.tapError(next(), (failed) => Effect.sync(() => (downstream = Cause.originalError(failed))))
      return Effect.catchAllCause(
        Effect.suspend(() => listener(input, trackedNext)),
        (cause): Effect.Effect<never, PreStepFailed> => {
          // Effect wraps failed objects in span-annotating proxies; `cause` carries the original value.
          const failure = Option.map(Cause.failureOption(cause), Cause.originalError)
          // A defect becomes a typed failure here: the loop is told, so an aborted turn still publishes it.
          if (Option.isSome(failure)) {
            return Effect.zipRight(
              reportDefects(cause),
              Effect.fail(
                downstream !== undefined && failure.value === downstream
                  ? downstream
                  : new PreStepFailed({ turn: input.turn, step: input.step, cause: failure.value })
              )
            )
          }
          const defect = Option.map(Cause.dieOption(cause), Cause.originalError)
          return Option.isSome(defect)
            ? Effect.zipRight(
              reportDefects(cause),
              Effect.fail(new PreStepFailed({ turn: input.turn, step: input.step, cause: defect.value }))
            )
            : Effect.failCause(cause as Cause.Cause<never>)
        }
      )
    })
