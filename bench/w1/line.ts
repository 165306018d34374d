/**
 * The result line every W1 runner prints (tiller's and each peer's, see `peers/harness.mjs`), and
 * the workload constants they share: the prompt and the constant the `echo` tool returns.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * One timed W1 run of one system in its own process: wall-clock `ms` and `stepsPerSec`, the CPU
 * time of the run, and `peakRssBytes`, that process's peak RSS.
 *
 * @since 0.1.0
 * @category models
 */
export const W1Line = Schema.Struct({
  system: Schema.String,
  steps: Schema.Int,
  ms: Schema.Number,
  /** CPU time (user + system) the process spent during the timed run. */
  cpuMs: Schema.Number,
  stepsPerSec: Schema.Number,
  peakRssBytes: Schema.Number
})

/**
 * The decoded result line of one run.
 *
 * @since 0.1.0
 * @category models
 */
export type W1Line = typeof W1Line.Type

/**
 * Decodes a runner's stdout line (JSON) into a `W1Line`.
 *
 * @since 0.1.0
 * @category codecs
 */
export const decodeW1Line = Schema.decodeUnknownEither(Schema.parseJson(W1Line))

/**
 * The prompt every system starts its W1 session from.
 *
 * @since 0.1.0
 * @category workloads
 */
export const W1_PROMPT = "Call echo until the script ends."

/**
 * What the trivial `echo` tool returns, in every system.
 *
 * @since 0.1.0
 * @category workloads
 */
export const W1_ECHO_RESULT = "ok"
