/**
 * The harness every W1 peer runner shares: reads the system and the step counts from argv, runs
 * one untimed warm-up and one timed run in this process, checks the run did the whole W1 workload
 * (and that every model call after the first saw the previous step's tool result as the last
 * message), and prints one JSON line `{system, steps, ms, cpuMs, stepsPerSec, peakRssBytes}` on
 * stdout.
 *
 * Usage of a runner: `node bench/w1/peers/<peer>.mjs <system> <steps> <warmSteps>`, where
 * `<system>` names one of the runner's models (for example `pi-agent-streamfn` or `pi-agent`).
 */

/** The string the trivial `echo` tool returns, in every system. */
export const ECHO_RESULT = "ok"

/** The text of the final answer, in every system. */
export const FINAL_TEXT = "done"

/** The prompt every system starts from. */
export const PROMPT = "Call echo until the script ends."

/** The id of the `i`-th step's `echo` call (from 1), in every system. */
export const callId = (i) => `call-${i}`

/**
 * Counts what one run did: model calls, tool executions and model calls that saw the previous
 * step's tool result. A runner's model calls `model(isPreviousResult)` once per request, where
 * `isPreviousResult(id)` says whether the request's last message is the tool result of call `id`
 * (read from the request the model was handed, in the system's own message shape), and returns
 * the call's number (from 1); its tool calls `tool()` once per execution.
 */
export const counters = () => {
  const counts = { model: 0, tool: 0, sawResult: 0 }
  return {
    counts,
    model: (isPreviousResult) => {
      const n = ++counts.model
      if (n > 1 && isPreviousResult(callId(n - 1))) counts.sawResult++
      return n
    },
    tool: () => ++counts.tool
  }
}

/**
 * Fails unless the run called the model `steps + 1` times, executed the tool `steps` times, every
 * model call after the first saw the previous step's tool result as its last message (`steps`
 * calls) and the run ended with the final text.
 */
export const assertW1 = (system, steps, counts, finalText) => {
  const problems = []
  if (counts.model !== steps + 1) problems.push(`model called ${counts.model} times, expected ${steps + 1}`)
  if (counts.tool !== steps) problems.push(`tool executed ${counts.tool} times, expected ${steps}`)
  if (counts.sawResult !== steps) {
    problems.push(`${counts.sawResult} model calls saw the previous tool result last, expected ${steps}`)
  }
  if (finalText !== FINAL_TEXT) {
    problems.push(`final answer ${JSON.stringify(finalText)}, expected ${JSON.stringify(FINAL_TEXT)}`)
  }
  if (problems.length > 0) throw new Error(`${system} W1 run incomplete: ${problems.join("; ")}`)
}

const positiveInt = (text, name) => {
  const n = Number(text)
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(text)}`)
  return n
}

/**
 * Runs the system named by the first argument: `once(warmSteps)` untimed, then `once(steps)`, and
 * prints the result line. `systems` maps each system id the runner offers to its `once`, which
 * performs one complete W1 run, its setup untimed and its loop wrapped in `timed`, and returns the
 * milliseconds `timed` measured.
 */
export const runPeer = async (systems) => {
  const system = process.argv[2]
  const once = Object.hasOwn(systems, system ?? "") ? systems[system] : undefined
  if (once === undefined) {
    throw new Error(`system must be one of ${Object.keys(systems).join(", ")}, got ${JSON.stringify(system)}`)
  }
  const steps = positiveInt(process.argv[3] ?? "1000", "steps")
  const warmSteps = positiveInt(process.argv[4] ?? String(steps), "warm-up steps")
  await once(warmSteps)
  // No forced collection here: it would also deoptimize code the warm-up optimized (see bench/util.ts).
  const ms = await once(steps)
  const line = {
    system,
    steps,
    ms,
    cpuMs: lastCpuMs,
    stepsPerSec: steps / (ms / 1000),
    // maxRSS is in kilobytes: the process's peak over its whole life, warm-up included.
    peakRssBytes: process.resourceUsage().maxRSS * 1024
  }
  process.stdout.write(`${JSON.stringify(line)}\n`)
}

/**
 * Times an async function: wall-clock milliseconds (high-resolution clock), and the CPU time this
 * process spent meanwhile in `lastCpuMs` (read by `runPeer` after the timed run).
 */
export const timed = async (body) => {
  const cpu = process.cpuUsage()
  const start = process.hrtime.bigint()
  const value = await body()
  const ms = Number(process.hrtime.bigint() - start) / 1e6
  const used = process.cpuUsage(cpu)
  lastCpuMs = (used.user + used.system) / 1000
  return [value, ms]
}

let lastCpuMs = Number.NaN

/** Runs `main` and exits non-zero with the error on stderr when it fails. */
export const main = (promise) =>
  promise.catch((error) => {
    process.stderr.write(`${error?.stack ?? String(error)}\n`)
    process.exitCode = 1
  })
