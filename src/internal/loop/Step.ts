/**
 * One step of a turn after its `step/start`: request configuration, header, checkpoint, the
 * streamed attempt with its chunks and assistant message, request-error recovery with retries in
 * the same step, and the tool batch (SPEC 4.5, 4.6, 7.4).
 *
 * @since 0.1.0
 */
import { Cause, Data, Duration, Effect, Either, Exit, Option, ParseResult, STM, Stream, TRef } from "effect"
import { InvalidEvent, ModelError } from "../../domain/Errors.js"
import type { SessionEvent } from "../../domain/Event.js"
import { acceptsStreamChunkJson } from "../../domain/EventDecoder.js"
import type { MessageId } from "../../domain/Ids.js"
import { jsonEquals, jsonProblem } from "../../domain/Json.js"
import type { ModelRequest } from "../../domain/ModelRequest.js"
import type { ModelResponse } from "../../domain/ModelResponse.js"
import * as ModelResponseModule from "../../domain/ModelResponse.js"
import { isChunks, isStream } from "../../domain/ModelResponse.js"
import * as SafeDecode from "../../domain/SafeDecode.js"
import type { RequestConfig } from "../../domain/Seams.js"
import type { LlmFailure, RequestHeader, StreamChunk, ToolCallBlock } from "../../domain/Values.js"
import { StreamChunk as StreamChunkSchema } from "../../domain/Values.js"
import { appendDrafts, commit, dieOnFailure } from "../state/SessionState.js"
import type { Draft, LogSnapshot } from "../state/SessionState.js"
import { abortable, causeRecorded, checkpoint, checkpointNow, defectsOf, quietDone } from "./Activity.js"
import * as Assembler from "./Assembler.js"
import { originalError, ownFailure, toLlmFailure } from "./Failure.js"
import { hookDefaults } from "./HooksRunner.js"
import type { LoopContext } from "./LoopContext.js"
import { isCause, loopTx } from "./LoopTransaction.js"
import * as RequestView from "./RequestView.js"
import { DEFAULT_MAX_RETRY_DELAY, refuseRetryDelay } from "./RetryPolicy.js"
import type { StepResult } from "./StepResult.js"
import { aborted, failed } from "./StepResult.js"
import * as StreamPull from "./StreamPull.js"
import { runTools } from "./ToolBatch.js"

/** Sentinel failure: stop pulling the model stream (its outcome is settled). */
const STOP = Symbol.for("tiller/internal/Step/stop")

const configOf = (header: RequestHeader | undefined): RequestConfig => {
  if (header === undefined) return {}
  const { tools: _tools, ...config } = header
  return config
}

const seedConfig = (ctx: LoopContext): RequestConfig => {
  const last = configOf(ctx.requests.lastHeader)
  if (!ctx.requests.first) return last
  const d = ctx.defaults
  const pick = <K extends keyof RequestConfig>(key: K, value: RequestConfig[K] | undefined) =>
    value !== undefined ? { [key]: value } : last[key] !== undefined ? { [key]: last[key] } : {}
  return Object.freeze({
    ...pick("provider", d.model?.provider),
    ...pick("model", d.model?.model),
    ...pick("system", d.system),
    ...pick("maxTokens", d.maxTokens),
    ...pick("temperature", d.temperature)
  })
}

const headerOf = (
  config: RequestConfig,
  provider: string,
  model: string,
  tools: RequestHeader["tools"]
): RequestHeader => ({
  provider,
  model,
  ...(config.system !== undefined ? { system: config.system } : {}),
  ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
  ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
  tools
})

/**
 * The messages a request sends and the seq of the log's last event, read in one transaction.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepMessages {
  readonly messages: LogSnapshot["fold"]["messages"]
  readonly lastSeq: number
}

/**
 * The messages of a request, as a transaction that read the log finds them.
 *
 * @since 0.1.0
 * @category loop
 */
export const stepMessages = ({ events, fold }: LogSnapshot): StepMessages => ({
  messages: fold.messages,
  lastSeq: events.length - 1
})

/**
 * Runs step `k` of turn `n` until it ends; the caller writes `step/end`. `opened` is what the
 * transaction that opened the step read: the first request sends it when nothing ran in between
 * (no request listener, no header to log), without a transaction of its own.
 *
 * @since 0.1.0
 * @category loop
 */
export const runStep = (
  ctx: LoopContext,
  turn: number,
  step: number,
  opened: StepMessages
): Effect.Effect<StepResult> =>
  Effect.gen(function*() {
    const { ds, sessionId } = ctx
    const session = ds.session
    let attempt = 1
    while (true) {
      const tools = ctx.tools.list()
      const first = ctx.requests.first
      const previous = ctx.requests.lastHeader
      const quiet = ctx.hooks.isQuiet("request")
      let header: RequestHeader
      let reason: "initial" | "resume" | "change" | undefined
      const unchanged = quiet && !first && previous !== undefined && previous.tools === tools
      if (unchanged) {
        // Q1-Q2 without a request listener, after a header and with the same tools: the default
        // configuration is the last header's, so the header is that one and nothing is logged.
        header = previous
        reason = undefined
      } else {
        // Q1: the request configuration.
        const seed = seedConfig(ctx)
        const configured = quiet
          ? quietDone(hookDefaults.request(seed))
          : yield* abortable(ds, ctx.hooks.request({ sessionId, turn, step, attempt, config: seed }, seed))
        if (configured._tag === "Aborted") return aborted(defectsOf(configured.exit))
        if (Exit.isFailure(configured.exit)) {
          const error = originalError(configured.exit)
          return failed(toLlmFailure(error), error, defectsOf(configured.exit))
        }
        const config = configured.exit.value
        if (config.provider === undefined || config.model === undefined) {
          return failed(ownFailure("NO_ROUTE", "no provider and model are configured for the request"))
        }
        // Q2: the header, logged when needed.
        header = headerOf(config, config.provider, config.model, tools)
        reason = first
          ? (previous === undefined ? "initial" : "resume")
          : jsonEquals(header, previous)
          ? undefined
          : "change"
      }
      // Q3: the messages, read with the header's append in one transaction.
      // A header to log is checked like any caller's event (a request hook can put anything in the
      // configuration): an invalid one is not written and fails the step (INVALID_EVENT).
      const decided = unchanged && attempt === 1
        // Nothing ran since the step opened: what its transaction read (a cause recorded since stops
        // the attempt at its first append, which reads the cause, before anything is written).
        ? opened
        : reason === undefined
        // Nothing to write: the committed log, read with the cause in one transaction.
        ? yield* loopTx(ctx, STM.map(TRef.get(session.log), stepMessages))
        : yield* Effect.catchTag(
          loopTx(
            ctx,
            STM.zipRight(
              appendDrafts(session, [{ type: "request/header", data: { header, reason } }], false),
              STM.map(TRef.get(session.log), stepMessages)
            )
          ),
          "InvalidEvent",
          (error) => Effect.succeed(error)
        )
      if (isCause(decided)) return aborted()
      if (decided instanceof InvalidEvent) return failed(ownFailure("INVALID_EVENT", decided.message))
      ctx.requests.first = false
      ctx.requests.lastHeader = header
      const request = RequestView.make({ sessionId, turn, step, attempt, ...header }, decided.messages)
      // Q4: checkpoint before dispatch (D13).
      const reached = checkpointNow(ds, decided.lastSeq) ?? (yield* checkpoint(ds, decided.lastSeq))
      if (reached._tag === "Aborted") return aborted()
      if (Exit.isFailure(reached.exit)) return yield* Effect.interrupt
      // Q5, Q6: stream the attempt.
      const outcome = yield* runAttempt(ctx, turn, step, attempt, request)
      switch (outcome._tag) {
        case "Aborted":
          return aborted(outcome.defects)
        case "Failed":
          return failed(outcome.failure, outcome.error)
        case "Stopped": {
          if (outcome.finish === "max-tokens") return { _tag: "MaxTokens" }
          if (outcome.calls.length === 0) return { _tag: "Completed" }
          return yield* runTools(ctx, turn, step, outcome.calls)
        }
        case "ErrorFinish": {
          // Q7: request-error recovery.
          const decision = yield* abortable(
            ds,
            ctx.hooks.requestError({ sessionId, turn, step, attempt, failure: outcome.failure })
          )
          if (decision._tag === "Aborted") return aborted(defectsOf(decision.exit))
          if (Exit.isFailure(decision.exit)) {
            const error = originalError(decision.exit)
            return failed(toLlmFailure(error), error, defectsOf(decision.exit))
          }
          const action = decision.exit.value
          if (action._tag === "Fail") return failed(outcome.failure, new ModelError({ failure: outcome.failure }))
          // A whole number of milliseconds, at most the cap: a longer (or infinite) delay is not
          // slept on and fails the turn with RETRY_DELAY_TOO_LONG (a cause recorded meanwhile still
          // wins when the turn closes).
          const asked = Math.max(0, Math.round(Duration.toMillis(action.delay)))
          const refused = refuseRetryDelay(
            asked,
            outcome.failure,
            ctx.defaults.maxRetryDelay ?? DEFAULT_MAX_RETRY_DELAY
          )
          if (refused !== undefined) return failed(refused, new ModelError({ failure: refused }))
          // What the log can hold (only an infinite cap lets a delay this long through).
          const delayMs = Math.min(Number.MAX_SAFE_INTEGER, asked)
          const logged = yield* loopTx(
            ctx,
            dieOnFailure(appendDrafts(session, [{
              type: "llm/retry",
              data: { turn, step, attempt, delayMs, failure: outcome.failure }
            }], true))
          )
          if (isCause(logged)) return aborted()
          const slept = yield* abortable(ds, Effect.sleep(Duration.millis(delayMs)))
          if (slept._tag === "Aborted") return aborted()
          attempt += 1
          continue
        }
      }
    }
  })

// How one streamed attempt of a step ended.
type AttemptOutcome = Data.TaggedEnum<{
  /** A finish chunk stopped the stream (its kind and the assistant message's tool calls). */
  Stopped: { readonly finish: "stop" | "max-tokens"; readonly calls: ReadonlyArray<ToolCallBlock> }
  /** A finish chunk of kind error: the attempt failed, and may be retried. */
  ErrorFinish: { readonly failure: LlmFailure }
  /** A cause was recorded during the attempt. */
  Aborted: { readonly defects: ReadonlyArray<unknown> }
  /** The attempt failed outside the model's finish (an invalid draft, a broken stream). */
  Failed: { readonly failure: LlmFailure; readonly error: unknown }
}>

const AttemptOutcome = Data.taggedEnum<AttemptOutcome>()

const decodeChunk = SafeDecode.decodeUnknownEither(StreamChunkSchema, { onExcessProperty: "error" })

// Why a model's chunk cannot be logged: not lossless JSON, or not a StreamChunk (SPEC 5.1: loop
// appends are checked like any other). The hand-written check answers the usual case.
const chunkProblem = (chunk: unknown): string | undefined => {
  const problem = jsonProblem(chunk, "chunk")
  if (problem !== undefined || acceptsStreamChunkJson(chunk)) return problem
  const decoded = decodeChunk(chunk)
  return Either.isLeft(decoded) ? `chunk: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}` : undefined
}

const chunkDraft = (turn: number, step: number, attempt: number, chunk: StreamChunk): Draft => ({
  type: "assistant/chunk",
  data: { turn, step, attempt, chunk }
})

const messageOf = (error: unknown): string =>
  typeof error === "object" && error !== null && typeof (error as { message?: unknown }).message === "string"
    ? (error as { message: string }).message
    : String(error)

const errorFinish = (failure: LlmFailure): StreamChunk => ({ type: "finish", finish: { kind: "error", failure } })

/**
 * One attempt: stream the request, log every chunk, assemble the message; on a cancel before the
 * finish transaction, log the interrupted prefix.
 */
const runAttempt = (
  ctx: LoopContext,
  turn: number,
  step: number,
  attempt: number,
  request: ModelRequest
): Effect.Effect<AttemptOutcome> =>
  Effect.gen(function*() {
    const origin = {
      id: crypto.randomUUID() as MessageId,
      provider: request.provider,
      model: request.model
    }
    let assembler = Assembler.empty()
    const chunkSeqs: Array<number> = []
    // Set once the attempt's outcome is fixed by a finish chunk (real or synthetic).
    let settled: AttemptOutcome | undefined
    let invalid: LlmFailure | undefined

    // Appends the attempt's drafts in one step, then `then` of the events. A recorded cause (nothing
    // is written, as for any loop append), a poisoned session or an invalid draft (`invalid` is
    // set) stops the attempt by interruption.
    const appendOrStop = <A>(
      drafts: (length: number) => ReadonlyArray<Draft>,
      then: (events: ReadonlyArray<SessionEvent>) => A
    ) =>
      Effect.flatMap(
        Effect.either(
          loopTx(
            ctx,
            STM.flatMap(
              TRef.get(ctx.ds.session.log),
              ({ events }) => appendDrafts(ctx.ds.session, drafts(events.length), true)
            )
          )
        ),
        (written): Effect.Effect<A> => {
          if (Either.isLeft(written)) {
            invalid = ownFailure("INVALID_EVENT", written.left.message)
            return Effect.interrupt
          }
          return isCause(written.right) ? Effect.interrupt : Effect.succeed(then(written.right))
        }
      )

    // Chunks received but not yet logged, with the assembler state they lead to. They are logged
    // together (one transaction per pulled batch of the stream), so `assembler` and `chunkSeqs`
    // only ever describe logged chunks, which an interrupted prefix cites.
    let pending: Array<Draft> = []
    let pendingAssembler = assembler

    const flush = (extra: ReadonlyArray<Draft> = []) => {
      const drafts = extra.length === 0 ? pending : [...pending, ...extra]
      pending = []
      if (drafts.length === 0) return Effect.void
      const next = pendingAssembler
      return appendOrStop(() => drafts, (events) => {
        for (const event of events) if (event.type === "assistant/chunk") chunkSeqs.push(event.seq)
        assembler = next
      })
    }

    const finishWith = (chunk: StreamChunk, failure: LlmFailure) =>
      Effect.map(flush([chunkDraft(turn, step, attempt, chunk)]), () => {
        settled = AttemptOutcome.ErrorFinish({ failure })
      })

    const finishMessage = (chunk: StreamChunk, kind: "stop" | "max-tokens") => {
      const drafts = [...pending, chunkDraft(turn, step, attempt, chunk)]
      pending = []
      const assembled = Assembler.finishMessage(pendingAssembler, origin, kind)
      // The last chunks and the message in one append; the message cites every chunk's seq.
      return appendOrStop((length) => {
        const seqs = [...chunkSeqs]
        for (let i = 0; i < drafts.length; i++) seqs.push(length + i)
        return [...drafts, {
          type: "assistant/message",
          data: {
            turn,
            step,
            attempt,
            message: assembled.message,
            ...(assembled.usage !== undefined ? { usage: assembled.usage } : {})
          },
          surfaceOp: "append",
          sourceEventSeqs: seqs
        }]
      }, () => {
        settled = AttemptOutcome.Stopped({
          finish: kind,
          calls: assembled.message.content.filter((b): b is ToolCallBlock => b.type === "tool-call")
        })
      })
    }

    // One pulled batch of chunks: fed to the assembler in order, logged in one transaction; a
    // finish, an invalid or a malformed chunk ends the batch (later chunks are ignored).
    const onChunks = (chunks: Iterable<StreamChunk>): Effect.Effect<void, typeof STOP> =>
      Effect.suspend(() => {
        for (const chunk of chunks) {
          if (settled !== undefined) break
          const problem = chunkProblem(chunk)
          if (problem !== undefined) {
            return Effect.zipRight(
              flush(),
              Effect.suspend(() => {
                invalid = ownFailure("INVALID_EVENT", `assistant/chunk: ${problem}`)
                return Effect.interrupt
              })
            )
          }
          if (chunk.type === "finish") {
            const finish = chunk.finish
            if (finish.kind === "stop" || finish.kind === "max-tokens") return finishMessage(chunk, finish.kind)
            return finishWith(chunk, finish.failure)
          }
          const fed = Assembler.feed(pendingAssembler, chunk)
          if (fed._tag === "Left") {
            const failure = ownFailure("MALFORMED_STREAM", fed.left)
            return Effect.zipRight(finishWith(errorFinish(failure), failure), Effect.fail(STOP))
          }
          pendingAssembler = fed.right
          pending.push(chunkDraft(turn, step, attempt, chunk))
        }
        return flush()
      })

    const response = responseOf(ctx, request)
    // Every chunk at once is read inline (below); an Effect or a Stream is raced against the cause.
    const chunks = isChunks(response) ? response : undefined
    const pulled: Effect.Effect<void, ModelError | typeof STOP> = chunks !== undefined
      ? Effect.suspend(() => onChunks(chunks))
      : isStream(response)
      ? StreamPull.forEachChunk(response, onChunks)
      : Effect.isEffect(response)
      ? Effect.flatMap(response, onChunks)
      : Effect.die(new TypeError("the model answered neither chunks, an Effect of chunks nor a Stream"))
    // A stream that ended (or stopped being pulled) without a finish gets a synthetic one.
    const noFinish = () => {
      if (settled !== undefined || invalid !== undefined) return Effect.void
      const failure = ownFailure("NO_FINISH", "the model stream ended without a finish chunk")
      return finishWith(errorFinish(failure), failure)
    }
    // The stream failed, or interrupted itself (an interruption without a recorded cause, a failure
    // of the stream like any other, 4.5 Q5).
    const streamFailed = (cause: Cause.Cause<unknown>) => {
      if (settled !== undefined) return Effect.void // the finish chunk fixed the outcome
      const error = Cause.isInterruptedOnly(cause) ? undefined : originalError(Exit.failCause(cause))
      const failure = error instanceof ModelError
        ? error.failure
        : ownFailure("UNKNOWN", error === undefined ? "the model stream was interrupted" : messageOf(error))
      return finishWith(errorFinish(failure), failure)
    }
    const consume = Effect.matchCauseEffect(pulled, {
      onFailure: (cause) => {
        if (Option.getOrUndefined(Cause.failureOption(cause)) === STOP) return noFinish() // stop pulling
        if (invalid !== undefined) return Effect.failCause(cause)
        // An interruption is a cancel only with a cause recorded.
        if (!Cause.isInterruptedOnly(cause)) return streamFailed(cause)
        return Effect.flatMap(
          causeRecorded(ctx.ds),
          (canceled) => canceled ? Effect.failCause(cause) : streamFailed(cause)
        )
      },
      onSuccess: noFinish
    })

    // Reading every chunk at once cannot block: it runs inline, and its transactions stop it when a
    // cause is recorded (as the race would). Anything else races the cause in a fiber of its own.
    const run = chunks !== undefined
      ? { _tag: "Done" as const, exit: yield* Effect.exit(consume) }
      : yield* abortable(ctx.ds, consume)
    if (invalid !== undefined) return AttemptOutcome.Failed({ failure: invalid, error: invalid })
    if (run._tag === "Aborted" || Exit.isInterrupted(run.exit)) {
      const defects = defectsOf(run.exit)
      // The assistant message stands when it was recorded before the cause (K7 follows).
      if (settled !== undefined && settled._tag === "Stopped") return settled
      if (settled === undefined) yield* writeInterruptedPrefix(ctx, turn, step, attempt, assembler, origin, chunkSeqs)
      return AttemptOutcome.Aborted({ defects })
    }
    if (Exit.isFailure(run.exit)) {
      const error = originalError(run.exit)
      return AttemptOutcome.Failed({ failure: toLlmFailure(error), error })
    }
    return settled ?? AttemptOutcome.Failed({ failure: ownFailure("NO_FINISH", "no finish"), error: undefined })
  })

// The model's response to `request`; a model that throws instead of answering fails that response
// (4.5 Q5), logged as its synthetic error finish.
const responseOf = (ctx: LoopContext, request: ModelRequest): ModelResponse => {
  try {
    return ModelResponseModule.responseOf(ctx.model, request)
  } catch (defect) {
    return Stream.die(defect)
  }
}

const writeInterruptedPrefix = (
  ctx: LoopContext,
  turn: number,
  step: number,
  attempt: number,
  assembler: Assembler.AssemblerState,
  origin: Assembler.MessageOrigin,
  chunkSeqs: ReadonlyArray<number>
): Effect.Effect<void> => {
  const prefix = Assembler.interruptedPrefix(assembler, origin)
  if (prefix === undefined) return Effect.void
  return commit(
    ctx.ds.session,
    appendDrafts(ctx.ds.session, [{
      type: "assistant/message",
      data: {
        turn,
        step,
        attempt,
        message: prefix.message,
        ...(prefix.usage !== undefined ? { usage: prefix.usage } : {}),
        interrupted: true
      },
      surfaceOp: "append",
      sourceEventSeqs: [...chunkSeqs]
    }], true)
  ).pipe(Effect.orDie, Effect.asVoid)
}
