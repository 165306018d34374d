/**
 * The post-compaction context of an overflow, in the request that retries it and the later ones.
 * An overflow is recovered inside its step, where no message can be entered (a step's messages are
 * entered when it opens), so the context is added to the system prompt of the next request, which
 * is the retry; its `request/header` logs it, and a request's configuration is the last header's
 * unless something changes it (SPEC Q1), so the later requests hold it too. The next compaction
 * takes it out again (at the request after it). A request listener is registered only until the
 * request it changes, so the loop keeps its quiet request path otherwise.
 *
 * @since 0.1.0
 */
import { Effect, ExecutionStrategy, Exit, Scope } from "effect"
import type { RequestConfig, RequestInput } from "../../domain/Seams.js"

/**
 * A request listener, as the `onRequest` waterfall takes it.
 *
 * @since 0.1.0
 * @category models
 */
export type RequestListener = (
  input: RequestInput,
  next: () => Effect.Effect<RequestConfig, unknown>
) => Effect.Effect<RequestConfig, unknown>

/**
 * The context one session's requests hold.
 *
 * @since 0.1.0
 * @category models
 */
export interface SystemContext {
  /** From the next request on, the system prompt holds `texts` instead of the context it held (none: no context). */
  readonly set: (texts: ReadonlyArray<string>) => Effect.Effect<void>
}

const SEPARATOR = "\n\n"

/**
 * A configuration whose system prompt holds `text` at its end instead of `previous` (each optional).
 *
 * @since 0.1.0
 * @category combinators
 */
export const withContext = (
  config: RequestConfig,
  previous: string | undefined,
  text: string | undefined
): RequestConfig => {
  let system = config.system ?? ""
  if (previous !== undefined) {
    if (system === previous) system = ""
    else if (system.endsWith(SEPARATOR + previous)) {
      system = system.slice(0, system.length - SEPARATOR.length - previous.length)
    }
  }
  if (text !== undefined) system = system.trim() === "" ? text : system + SEPARATOR + text
  const { system: _system, ...rest } = config
  return system === "" ? rest : { ...rest, system }
}

/**
 * The context over a registration of request listeners; a registration ends at the request it
 * changes, or with the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  register: (listener: RequestListener) => Effect.Effect<void, never, Scope.Scope>
): Effect.Effect<SystemContext, never, Scope.Scope> =>
  Effect.gen(function*() {
    const owner = yield* Effect.scope
    // What the last changed request's system prompt holds, and the change waiting for the next request.
    let held: string | undefined
    let waiting: { text: string | undefined; readonly scope: Scope.CloseableScope } | undefined
    const listener: RequestListener = (_input, next) =>
      Effect.flatMap(next(), (config) => {
        const change = waiting
        if (change === undefined) return Effect.succeed(config)
        const changed = withContext(config, held, change.text)
        held = change.text
        waiting = undefined
        // A run keeps the listeners it started with: the listener can go while it runs.
        return Effect.as(Scope.close(change.scope, Exit.void), changed)
      })
    const set = (texts: ReadonlyArray<string>): Effect.Effect<void> =>
      Effect.gen(function*() {
        const text = texts.length === 0 ? undefined : texts.join(SEPARATOR)
        if (waiting !== undefined) {
          waiting.text = text
          return
        }
        if (text === held) return
        const scope = yield* Scope.fork(owner, ExecutionStrategy.sequential)
        waiting = { text, scope }
        yield* Scope.extend(register(listener), scope)
      })
    return { set }
  })
