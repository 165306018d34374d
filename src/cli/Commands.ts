/**
 * The `tiller` command tree on `@effect/cli`: `chat`, `run`, `sessions`, `log`, `check`, `fork`,
 * `resume`, `compact`, `approve`, `serve` and `mcp`, with the global options `--db`, `--model`,
 * `--no-tools`, `--context-window` and `--mcp`; `chat`, `run` and `log` take `--server URL` to work
 * on a session of a `tiller serve` server instead of opening it in this process.
 *
 * @since 0.1.0
 */
import { Args, Command, Options } from "@effect/cli"
import type { FileSystem, Path } from "@effect/platform"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as HttpClient from "@effect/platform/HttpClient"
import { Config, Effect, Either, Layer, Option, Schema } from "effect"
import { checkLog } from "../domain/Check.js"
import * as Cost from "../domain/Cost.js"
import { SessionId } from "../domain/Ids.js"
import type { PriceTable } from "../domain/Prices.js"
import { foldOptionsOf, validateLoaded } from "../internal/session/SessionOpen.js"
import { Permissions } from "../layers/Permissions.js"
import { SessionReference } from "../layers/SessionReference.js"
import { Sessions } from "../layers/Sessions.js"
import type { Mcp } from "../services/Mcp.js"
import { SessionStore } from "../services/SessionStore.js"
import { approve } from "./Approve.js"
import * as BuiltinTools from "./BuiltinTools.js"
import { chat, runOnce } from "./Chat.js"
import { CliError, ExitWith } from "./CliError.js"
import { compactSession } from "./Compact.js"
import * as Database from "./Database.js"
import type { GlobalOptions } from "./Environment.js"
import * as Environment from "./Environment.js"
import * as ForkPoint from "./ForkPoint.js"
import { exportHtml } from "./HtmlExport.js"
import * as McpCommand from "./McpCommand.js"
import * as McpSettings from "./McpSettings.js"
import * as Output from "./Output.js"
import * as PriceSettings from "./PriceSettings.js"
import * as ReadOnlyStore from "./ReadOnlyStore.js"
import { chatRemote } from "./RemoteChat.js"
import { logRemote, runRemote } from "./RemoteRun.js"
import * as RemoteSession from "./RemoteSession.js"
import * as Serve from "./Serve.js"
import { timeline } from "./Timeline.js"
import { traceSession, withLiveTelemetry } from "./Trace.js"

const db = Options.text("db").pipe(
  Options.withDescription(
    `The SQLite file, or postgres:// URL of the PostgreSQL database, that holds the sessions (env TILLER_DB; default ${Environment.DEFAULT_DB})`
  ),
  Options.withFallbackConfig(Config.string("TILLER_DB")),
  Options.withDefault(Environment.DEFAULT_DB)
)
const model = Options.text("model").pipe(
  Options.withDescription(
    `The model (env TILLER_MODEL; default demo). This version has: ${Environment.MODELS.join(", ")}`
  ),
  Options.withFallbackConfig(Config.string("TILLER_MODEL")),
  Options.withDefault("demo")
)
const noTools = Options.boolean("no-tools").pipe(
  Options.withDescription(`Offer the model no built-in tools (${BuiltinTools.NAMES.join(", ")})`)
)
const addDir = Options.text("add-dir").pipe(
  Options.withDescription(
    "A further directory the file tools may read and write besides the working directory (repeatable)"
  ),
  Options.repeated
)
const permissionMode = Options.choice("permission-mode", Permissions.MODES).pipe(
  Options.withDescription(
    "default: Read, Glob and Grep run, Write, Edit and Bash ask (refused in run); acceptEdits: edits run too, Bash asks; " +
      "plan: read-only, edits and commands are refused; bypassPermissions: everything runs except what a deny rule names " +
      "(default: the settings' permissions.defaultMode, else default)"
  ),
  Options.optional
)
const allow = Options.text("allow").pipe(
  Options.withDescription(
    "Allow tool calls matching RULE without asking, in Claude Code's syntax: Bash(npm test:*), Bash(git status), Edit(src/**), Read (repeatable; " +
      "rules also come from permissions.allow/ask/deny in the settings files)"
  ),
  Options.repeated
)
const skipPermissions = Options.boolean("dangerously-skip-permissions").pipe(
  Options.withDescription(
    "The same as --permission-mode bypassPermissions: every tool call runs without asking, except what a deny rule names"
  )
)

const contextWindow = Options.integer("context-window").pipe(
  Options.withDescription(
    "The model's context window in tokens (default: known per model, else 32768); old tool results are pruned near it"
  ),
  Options.withSchema(Schema.Int.pipe(Schema.positive())),
  Options.optional
)

const claudeHooks = Options.boolean("claude-hooks").pipe(
  Options.withDescription(
    "Also run the hooks of .claude/settings.json, .claude/settings.local.json and ~/.claude/settings.json (those of .tiller/settings.json always run)"
  )
)
const readSession = Options.boolean("read-session").pipe(
  Options.withDescription("Offer the model the read-only read_session tool: it reads other sessions of this database")
)

const prices = Options.text("prices").pipe(
  Options.withPseudoName("FILE"),
  Options.withDescription(
    "A JSON file of model prices in USD per million tokens ({\"MODEL\": {\"input\", \"output\", \"cacheRead\", \"cacheWrite\"}}) over tiller's table and .tiller/settings.json's \"prices\" (env TILLER_PRICES)"
  ),
  Options.withFallbackConfig(Config.string("TILLER_PRICES")),
  Options.optional
)

const mcp = Options.text("mcp").pipe(
  Options.withPseudoName("FILE"),
  Options.withDescription(
    "An MCP configuration file ({\"mcpServers\": {NAME: {command, args, env} or {url, headers}}}) read after .mcp.json and .tiller/mcp.json (repeatable)"
  ),
  Options.repeated
)

const tiller = Command.make("tiller", {
  db,
  model,
  noTools,
  contextWindow,
  claudeHooks,
  readSession,
  addDir,
  permissionMode,
  allow,
  skipPermissions,
  prices,
  mcp
}).pipe(
  Command.withDescription("An event-sourced agent runtime: chat with an agent whose session lives in a SQLite file.")
)

const maxSteps = Options.integer("max-steps").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.positive())),
  Options.withPseudoName("N"),
  Options.withDescription(
    "The most steps one turn runs (default 100); a turn that would run more ends with error MAX_STEPS, shown by tiller log"
  ),
  Options.optional
)

const sessionId = Args.text({ name: "ID" }).pipe(Args.withSchema(SessionId), Args.withDescription("A session id"))
const sessionOption = Options.text("session").pipe(
  Options.withSchema(SessionId),
  Options.withDescription("The session to use: continued when stored, created otherwise (default: a new session)"),
  Options.optional
)

const server = Options.text("server").pipe(
  Options.withPseudoName("URL"),
  Options.withDescription(
    "Talk to a tiller serve server at URL (http://HOST:PORT) instead of opening the session in this process"
  ),
  Options.optional
)
const serverTokenFile = Options.text("token-file").pipe(
  Options.withPseudoName("FILE"),
  Options.withDescription(
    `With --server: the bearer token, the first line of FILE (default: the ${Serve.TOKEN_ENV} variable)`
  ),
  Options.optional
)

/** Runs `body` on session `id` of the server at `url`, with the token of `--token-file` or the variable. */
const withServer = <A, E, R>(
  url: string,
  tokenFile: Option.Option<string>,
  id: SessionId,
  body: (session: RemoteSession.RemoteSession) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    if (!/^https?:\/\/[^/\s]+/.test(url)) {
      return yield* new CliError({ reason: `--server needs an http:// or https:// URL, not ${JSON.stringify(url)}` })
    }
    const token = yield* RemoteSession.readToken(Option.getOrUndefined(tokenFile))
    const client = yield* HttpClient.HttpClient
    return yield* body(RemoteSession.make(client, { server: url, token, sessionId: id }))
  }).pipe(Effect.provide(NodeHttpClient.layerUndici))

/**
 * The command on the server at `--server URL` when one is given (`onServer`), else the in-process
 * command it is applied to (built, never run).
 */
const orOnServer = <A, E2, R2>(
  given: Option.Option<string>,
  onServer: (url: string) => Effect.Effect<A, E2, R2>
) =>
<E1, R1>(inProcess: Effect.Effect<A, E1, R1>): Effect.Effect<A, E1 | E2, R1 | R2> =>
  Option.isSome(given) ? onServer(given.value) : inProcess

/**
 * Runs `body` with the sessions that the global options select. Commands that open no agent
 * (`agent: false`) accept any `--model`: they never ask a model.
 */
const withSessions = <A, E>(
  body: (
    globals: GlobalOptions
  ) => Effect.Effect<A, E, Sessions | SessionStore | Mcp | FileSystem.FileSystem | Path.Path>,
  options: { readonly agent: boolean; readonly maxSteps?: Option.Option<number> } = { agent: true }
) =>
  Effect.flatMap(tiller, (globals) =>
    Effect.provide(
      body(globals),
      Environment.layer(
        options.agent
          ? { ...globals, ...(options.maxSteps === undefined ? {} : { maxSteps: options.maxSteps }) }
          : { ...globals, model: "demo" },
        { mcp: options.agent }
      )
    ))

const newSessionId = ForkPoint.newSessionId

const toolNames = (globals: GlobalOptions) => [
  ...(globals.noTools ? [] : BuiltinTools.NAMES),
  ...(globals.readSession === true ? ["read_session"] : [])
]

/** The price table of the global options: tiller's, the settings', `--prices`. */
const pricesOf = (globals: GlobalOptions) => PriceSettings.load(Option.getOrUndefined(globals.prices ?? Option.none()))

/** The hook bridge, permissions and references of a session command, as the global options say. */
const compositionsOf = (globals: GlobalOptions) => ({
  claudeHooks: globals.claudeHooks === true,
  db: globals.db,
  permissions: { mode: Environment.permissionModeOf(globals), allow: globals.allow ?? [] },
  model: Environment.modelNameOf(globals.model)
})

/** `tiller chat --server URL`. */
const chatOnServer = (session: Option.Option<SessionId>, tokenFile: Option.Option<string>) => (url: string) =>
  Effect.flatMap(tiller, (globals) =>
    Effect.flatMap(
      Option.match(session, { onNone: () => newSessionId, onSome: Effect.succeed }),
      (id) =>
        Effect.flatMap(
          pricesOf(globals),
          (prices) => withServer(url, tokenFile, id, (remote) => chatRemote(remote, { prices }))
        )
    ))

/** `tiller run --server URL`. */
const runOnServer = (
  prompt: string,
  inject: ReadonlyArray<string>,
  json: boolean,
  session: Option.Option<SessionId>,
  tokenFile: Option.Option<string>
) =>
(url: string) =>
  Effect.gen(function*() {
    const id = Option.isSome(session) ? session.value : yield* newSessionId
    yield* Output.errorLine(`session ${id}`)
    yield* withServer(url, tokenFile, id, (remote) => runRemote(remote, prompt, { contexts: inject, json }))
  })

/** `tiller log --server URL`. */
const logOnServer = (id: SessionId, json: boolean, tokenFile: Option.Option<string>) => (url: string) =>
  Effect.flatMap(tiller, (globals) =>
    Effect.flatMap(
      pricesOf(globals),
      (prices) => withServer(url, tokenFile, id, (remote) => logRemote(remote, { json, prices }))
    ))

const chatCommand = Command.make(
  "chat",
  { session: sessionOption, maxSteps, server, tokenFile: serverTokenFile },
  ({ maxSteps, server, session, tokenFile }) =>
    withSessions((globals) =>
      Effect.flatMap(
        Option.match(session, { onNone: () => newSessionId, onSome: Effect.succeed }),
        (id) =>
          Effect.flatMap(pricesOf(globals), (prices) =>
            withLiveTelemetry(
              id,
              chat(id, {
                toolNames: toolNames(globals),
                db: globals.db,
                model: globals.model,
                compositions: compositionsOf(globals),
                prices
              }),
              prices
            ))
      ), { agent: true, maxSteps }).pipe(orOnServer(server, chatOnServer(session, tokenFile)))
).pipe(
  Command.withDescription(
    "Chat with the agent: a line editor on a terminal, else the lines of stdin, read while the agent runs (/help lists the commands and keys)"
  )
)

const resumeCommand = Command.make("resume", {
  given: Args.optional(sessionId),
  last: Options.boolean("last").pipe(
    Options.withDescription("Continue the most recently used session (empty ones left out)")
  ),
  maxSteps
}, ({ given, last, maxSteps }) =>
  withSessions((globals) =>
    Effect.gen(function*() {
      if (Option.isSome(given) === last) {
        return yield* new CliError({ reason: "resume takes a session id or --last (tiller sessions lists them)" })
      }
      const id = Option.isSome(given) ? given.value : yield* Effect.scoped(Effect.gen(function*() {
        const reader = yield* ReadOnlyStore.open(globals.db)
        const list = (yield* reader.list).filter((s) => !isEmpty(s) && s.damage === undefined).sort((a, b) =>
          b.updatedAt - a.updatedAt
        )
        if (list.length === 0) {
          return yield* new CliError({ reason: `no session to resume in ${Database.label(globals.db)}` })
        }
        return list[0]!.sessionId
      }))
      const store = yield* SessionStore
      if (!(yield* store.exists(id))) {
        return yield* new CliError({ reason: `no session ${id} in ${Database.label(globals.db)}` })
      }
      const prices = yield* pricesOf(globals)
      yield* withLiveTelemetry(
        id,
        chat(id, {
          toolNames: toolNames(globals),
          db: globals.db,
          model: globals.model,
          compositions: compositionsOf(globals),
          prices
        }),
        prices
      )
    }), { agent: true, maxSteps })).pipe(
    Command.withDescription("Continue a stored session in the chat: ID, or --last for the most recently used one")
  )

const runCommand = Command.make(
  "run",
  {
    prompt: Args.text({ name: "PROMPT" }).pipe(Args.withDescription("The prompt of the turn")),
    inject: Options.text("inject").pipe(
      Options.withDescription("Context that enters the turn's first step before the prompt (repeatable)"),
      Options.repeated
    ),
    json: Options.boolean("json").pipe(Options.withDescription("Print the events as JSON lines instead of the answer")),
    session: sessionOption,
    maxSteps,
    server,
    tokenFile: serverTokenFile
  },
  ({ inject, json, maxSteps, prompt, server, session, tokenFile }) =>
    withSessions((globals) =>
      Effect.gen(function*() {
        const id = Option.isSome(session) ? session.value : yield* newSessionId
        yield* Output.errorLine(`session ${id}`)
        yield* withLiveTelemetry(
          id,
          runOnce(id, prompt, { contexts: inject, json, compositions: compositionsOf(globals) })
        )
      }), { agent: true, maxSteps }).pipe(orOnServer(server, runOnServer(prompt, inject, json, session, tokenFile)))
).pipe(
  Command.withDescription(
    "One headless turn (@ID or @ID@SEQ in the prompt attaches a snapshot of that session); exit code 0 when it completed, 1 otherwise"
  )
)

const handoffCommand = Command.make("handoff", {
  id: sessionId,
  goal: Args.text({ name: "GOAL" }).pipe(Args.withDescription("What the new session is to do")),
  as: Options.text("as").pipe(
    Options.withSchema(SessionId),
    Options.withDescription("The new session's id"),
    Options.optional
  ),
  json: Options.boolean("json").pipe(Options.withDescription("Print the events as JSON lines instead of the answer")),
  maxSteps
}, ({ as, goal, id, json, maxSteps }) =>
  withSessions((globals) =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      if (!(yield* store.exists(id))) {
        return yield* new CliError({ reason: `no session ${id} in ${Database.label(globals.db)}` })
      }
      const child = Option.isSome(as) ? as.value : yield* newSessionId
      if (yield* store.exists(child)) {
        return yield* new CliError({ reason: `a session ${child} already exists in ${Database.label(globals.db)}` })
      }
      const snapshot = yield* SessionReference.snapshot(id).pipe(
        Effect.mapError((error) => new CliError({ reason: error.message }))
      )
      yield* Output.errorLine(`session ${child} (handoff from ${id} up to seq ${String(snapshot.source["upTo"])})`)
      yield* runOnce(child, goal, { contexts: [], json, compositions: compositionsOf(globals), references: [snapshot] })
    }), { agent: true, maxSteps })).pipe(
    Command.withDescription(
      "Start a new session whose first prompt is GOAL with a quoted snapshot of session ID beside it; runs that turn as run does"
    )
  )

/**
 * Runs `body` over the database opened read-only: nothing is created, migrated or written (the
 * commands that only read: `sessions`, `log`, `check`).
 */
const withReader = <A, E, R>(body: (reader: ReadOnlyStore.Reader, globals: GlobalOptions) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(
    tiller,
    (globals) => Effect.scoped(Effect.flatMap(ReadOnlyStore.open(globals.db), (reader) => body(reader, globals)))
  )

/** A damaged session's note in `sessions`. */
const damageNote = (damage: ReadOnlyStore.Listed["damage"]) =>
  damage === undefined
    ? ""
    : `  (unreadable${
      damage._tag === "MalformedLog" && damage.seq !== undefined ? ` from seq ${damage.seq}` : ""
    }: see tiller check)`

/** A session with nothing in it: no turn, no pending input, nothing damaged (a chat that got no input). */
const isEmpty = (s: ReadOnlyStore.Listed) => s.turns === 0 && s.status === "idle" && s.damage === undefined

/**
 * What a session spent, for `sessions --json`: its tokens and cost folded over its own events
 * (a fork's copied seed left out); `null` when its log cannot be read.
 */
const spentJson = (reader: ReadOnlyStore.Reader, s: ReadOnlyStore.Listed, prices: PriceTable) =>
  reader.load(s.sessionId).pipe(
    Effect.map(({ events, header }) => {
      const { total } = Cost.sessionCost(events, prices, { from: header.seedLength })
      const { unpriced, usd, ...usage } = Cost.tallyJson(total)
      return { usage, cost: { usd, unpriced, text: Cost.describeCost(total) } }
    }),
    Effect.orElseSucceed(() => ({ usage: null, cost: null }))
  )

/** A session in `sessions --json`. */
const sessionJson = (s: ReadOnlyStore.Listed) => ({
  id: s.sessionId,
  status: s.status,
  lastUsed: new Date(s.updatedAt).toISOString(),
  turns: s.turns,
  events: s.events,
  title: s.title === undefined ? null : s.title.split("\n")[0]!.slice(0, 200),
  forkOf: s.header?.parent === undefined ? null : { id: s.header.parent.sessionId, seq: s.header.parent.boundary },
  damage: s.damage === undefined ? null : s.damage.message,
  approvals: s.approvals.map((p) => ({ callId: p.callId, tool: p.tool, input: p.input, reason: p.reason, seq: p.seq }))
})

const sessionsCommand = Command.make("sessions", {
  all: Options.boolean("all").pipe(Options.withDescription("Also list empty sessions (no turn, nothing pending)")),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      "Print one JSON array: per session its id, status, lastUsed, turns, events, title, forkOf, damage, approvals (the calls waiting for one), usage (tokens) and cost (usd, models without a price)"
    )
  )
}, ({ all, json }) =>
  withReader((reader, globals) =>
    Effect.gen(function*() {
      const stored = yield* reader.list
      // Most recently used first; empty sessions only with --all.
      const list = stored.filter((s) => all || !isEmpty(s)).sort((a, b) => b.updatedAt - a.updatedAt)
      if (json) {
        const prices = yield* pricesOf(globals)
        const rows = yield* Effect.forEach(
          list,
          (s) => Effect.map(spentJson(reader, s, prices), (spent) => ({ ...sessionJson(s), ...spent }))
        )
        return yield* Output.lines([JSON.stringify(rows, null, 2)])
      }
      const hidden = stored.length - list.length
      const note = hidden === 0 ? "" : ` (${hidden} empty session${hidden === 1 ? "" : "s"} left out; --all lists them)`
      if (list.length === 0) return yield* Output.lines([`no sessions in ${Database.label(globals.db)}${note}`])
      const width = Math.max(2, ...list.map((s) => s.sessionId.length))
      yield* Output.lines([
        `${"ID".padEnd(width)}  TURNS  EVENTS  STATUS             UPDATED                   TITLE`,
        ...list.map((s) =>
          `${s.sessionId.padEnd(width)}  ${String(s.turns).padStart(5)}  ${String(s.events).padStart(6)}  ${
            s.status.padEnd(17)
          }  ` +
          `${new Date(s.updatedAt).toISOString()}  ${(s.title ?? "").split("\n")[0]!.slice(0, 60)}` +
          (s.header?.parent !== undefined
            ? `  (fork of ${s.header.parent.sessionId} at seq ${s.header.parent.boundary})`
            : "") +
          damageNote(s.damage)
        ),
        ...(note === "" ? [] : [note.trim().slice(1, -1)])
      ])
    })
  )).pipe(Command.withDescription("List the stored sessions"))

const logCommand = Command.make("log", {
  id: sessionId,
  json: Options.boolean("json").pipe(Options.withDescription("Print the events as JSON lines")),
  server,
  tokenFile: serverTokenFile
}, ({ id, json, server, tokenFile }) =>
  withReader((reader, globals) =>
    Effect.gen(function*() {
      const { damage, events, header } = yield* reader.load(id)
      // The events before a damaged row are printed; then the damage is the command's failure.
      if (json) yield* Output.lines(events.map((event) => JSON.stringify(event)))
      else {
        const renderer = timeline(header, yield* pricesOf(globals))
        yield* Output.lines([
          ...renderer.heading,
          ...events.flatMap((event) => renderer.render(event)),
          ...renderer.total()
        ])
      }
      if (damage !== undefined) return yield* new CliError({ reason: damage.message })
    })
  ).pipe(orOnServer(server, logOnServer(id, json, tokenFile)))).pipe(
    Command.withDescription("Print a session's timeline: turns, steps, inbox changes, tool calls, why turns ended")
  )

const checkCommand = Command.make(
  "check",
  { id: sessionId },
  ({ id }) =>
    withReader((reader) =>
      Effect.gen(function*() {
        const { damage, events, header } = yield* reader.load(id)
        if (damage !== undefined) return yield* new CliError({ reason: damage.message })
        // A session another process has open may end inside its running turn: that is not judged.
        const holder = yield* reader.holder(id)
        if (holder !== undefined) {
          yield* Output.lines([
            `session ${id} is open in ${
              ReadOnlyStore.describeHolder(holder)
            }: its running turn is not judged (R19); check again once it is closed`
          ])
        }
        const lines = checkLog(events, { seedLength: header.seedLength, closed: holder === undefined })
          .map((v) => ({ seq: v.seq, line: `seq ${v.seq}  ${v.rule}  ${v.message}` }))
        // The log is also judged as opening it would judge it (SPEC 6.4 step 2, D6): the acceptance
        // rules of every event, as the CLI's agents are configured. What a resume refuses fails here too.
        const opened = validateLoaded(header, events, foldOptionsOf({}))
        if (Either.isLeft(opened)) {
          const refusal = opened.left
          const seq = refusal._tag === "MalformedLog" ? refusal.seq : undefined
          // A relational rule's refusal is already listed by the checker at the same event.
          if (seq === undefined || !lines.some((l) => l.seq === seq)) {
            const line = refusal._tag === "MalformedLog" && seq !== undefined
              ? `seq ${seq}  malformed  ${refusal.reason}`
              : refusal.message
            const at = lines.findIndex((l) => seq === undefined || l.seq > seq)
            lines.splice(at < 0 ? lines.length : at, 0, { seq: seq ?? -1, line })
          }
        }
        if (lines.length === 0) {
          return yield* Output.lines([`session ${id}: ${events.length} events, no violations`])
        }
        yield* Output.lines([
          ...lines.map((l) => l.line),
          `session ${id}: ${lines.length} violation${lines.length === 1 ? "" : "s"} in ${events.length} events`
        ])
        return yield* new ExitWith({ code: 1 })
      })
    )
).pipe(
  Command.withDescription(
    "Check a session's log against the log rules, as opening it would; exit code 1 on a violation"
  )
)

const forkCommand = Command.make("fork", {
  id: sessionId,
  atTurn: Options.integer("at").pipe(
    Options.withAlias("at-turn"),
    Options.withPseudoName("N"),
    Options.withDescription(
      "Copy up to the end of turn N, a turn number as the chat's /fork --at N (default: the whole log)"
    ),
    Options.optional
  ),
  atSeq: Options.integer("at-seq").pipe(
    Options.withPseudoName("SEQ"),
    Options.withDescription("Copy up to seq SEQ instead: a turn/end or a seq between turns (see tiller log ID)"),
    Options.optional
  ),
  as: Options.text("as").pipe(
    Options.withSchema(SessionId),
    Options.withDescription("The new session's id (default: a new s-... id, as chat and run name sessions)"),
    Options.optional
  )
}, ({ as, atSeq, atTurn, id }) =>
  withSessions((globals) =>
    Effect.gen(function*() {
      const point = yield* Either.match(
        ForkPoint.forkPointOf(Option.getOrUndefined(atTurn), Option.getOrUndefined(atSeq)),
        {
          onLeft: (reason) => Effect.fail(new CliError({ reason: `cannot fork ${id}: ${reason}` })),
          onRight: Effect.succeed
        }
      )
      const boundary = point._tag === "Turn"
        ? yield* Effect.flatMap(Environment.loadSession(id), ({ events }) =>
          Either.match(ForkPoint.boundaryOf(events, point), {
            onLeft: (reason) =>
              Effect.fail(new CliError({ reason: `cannot fork ${id}: ${reason} (see tiller log ${id})` })),
            onRight: Effect.succeed
          }))
        : point._tag === "Seq"
        ? point.seq
        : undefined
      // Another process with the session open may be inside a turn: the refusal names it.
      const openIn = Effect.scoped(Effect.flatMap(ReadOnlyStore.open(globals.db), (reader) => reader.holder(id))).pipe(
        Effect.map((holder) =>
          holder === undefined
            ? ""
            : ` (session ${id} is open in ${ReadOnlyStore.describeHolder(holder)}, which may be running a turn)`
        ),
        Effect.orElseSucceed(() =>
          ""
        )
      )
      const sessions = yield* Sessions
      const childId = yield* sessions.fork({
        source: id,
        ...(boundary !== undefined ? { boundary } : {}),
        childId: Option.isSome(as) ? as.value : yield* newSessionId
      }).pipe(
        Effect.catchTags({
          SessionNotFound: () => Effect.fail(new CliError({ reason: `no session ${id} in this database` })),
          ForkError: (error) =>
            Effect.flatMap(openIn, (note) =>
              Effect.fail(
                new CliError({
                  reason: `cannot fork ${id}: ${
                    error.reason === "child-exists"
                      ? `a session ${error.childId ?? ""} already exists`
                      : error.reason === "open-turn"
                      ? `${
                        error.boundary === undefined
                          ? "its log ends inside a turn"
                          : `seq ${error.boundary} is inside a turn`
                      }${note}; --at N names an ended turn, --at-seq SEQ a turn/end or a seq between turns (see tiller log ${id})`
                      : `--at-seq ${error.boundary} is not a seq of the log (see tiller log ${id})`
                  }`
                })
              ))
        })
      )
      const { header } = yield* Environment.loadSession(childId)
      yield* Output.lines([`forked ${id} at seq ${header.parent?.boundary ?? "?"} as ${childId}`])
    }), { agent: false })).pipe(
    Command.withDescription(
      "Copy a session up to the end of a turn (--at N, a turn number) or up to a seq (--at-seq SEQ) into a new session"
    )
  )

const approveCommand = Command.make(
  "approve",
  {
    id: sessionId,
    call: Args.text({ name: "CALL" }).pipe(
      Args.withDescription("The tool call id (default: the only pending one; tiller log ID shows them)"),
      Args.optional
    ),
    allow: Options.boolean("allow").pipe(Options.withDescription("Run the call")),
    deny: Options.boolean("deny").pipe(Options.withDescription("Refuse the call: its result is an error saying so")),
    reason: Options.text("reason").pipe(
      Options.withDescription("Why (shown to the model with a refusal, and in the log)"),
      Options.optional
    )
  },
  ({ allow, call, deny, id, reason }) =>
    withSessions((globals) => approve({ id, call, allow, deny, reason, db: globals.db }), { agent: false })
).pipe(
  Command.withDescription(
    "Answer a tool call that waits for approval in session ID, from any process: --allow runs it, --deny refuses it"
  )
)

const compactCommand = Command.make(
  "compact",
  {
    id: sessionId,
    focus: Options.text("focus").pipe(Options.withDescription("What the summary should keep in view"), Options.optional)
  },
  ({ focus, id }) =>
    withSessions((globals) => compactSession(id, Option.getOrUndefined(focus), compositionsOf(globals)))
).pipe(
  Command.withDescription(
    "Compact a stored session's context now: summarise its older history (or prune old tool results), losslessly"
  )
)

const traceCommand = Command.make("trace", {
  id: sessionId,
  endpoint: Options.text("endpoint").pipe(
    Options.withDescription("The OTLP/HTTP base URL (default: OTEL_EXPORTER_OTLP_ENDPOINT; /v1/traces is appended)"),
    Options.optional
  ),
  content: Options.boolean("content").pipe(
    Options.withDescription("Include message content (text, tool arguments and results)")
  )
}, ({ content, endpoint, id }) =>
  withReader((reader, globals) =>
    Effect.gen(function*() {
      const { damage, events, header } = yield* reader.load(id)
      if (damage !== undefined) return yield* new CliError({ reason: damage.message })
      yield* traceSession(header, events, {
        content,
        prices: yield* pricesOf(globals),
        ...(Option.isSome(endpoint) ? { endpoint: endpoint.value } : {})
      })
    })
  )).pipe(
    Command.withDescription(
      "Send a stored session's spans (OpenTelemetry GenAI conventions, original timestamps) to an OTLP/HTTP endpoint"
    )
  )

const exportCommand = Command.make("export", {
  id: sessionId,
  html: Options.file("html").pipe(
    Options.withDescription("The HTML file to write: one self-contained page with the session's timeline")
  )
}, ({ html, id }) =>
  withReader((reader, globals) =>
    Effect.gen(function*() {
      const { damage, events, header } = yield* reader.load(id)
      if (damage !== undefined) return yield* new CliError({ reason: damage.message })
      yield* exportHtml(header, events, html, yield* pricesOf(globals))
    })
  )).pipe(
    Command.withDescription(
      "Export a session as one self-contained HTML page (timeline, inbox lane, search, filters, links to a seq)"
    )
  )

const serveCommand = Command.make("serve", {
  port: Options.integer("port").pipe(
    Options.withPseudoName("N"),
    Options.withDescription("The HTTP port of the session API")
  ),
  host: Options.text("host").pipe(
    Options.withDescription("The HTTP address to listen on (default 127.0.0.1)"),
    Options.withDefault("127.0.0.1")
  ),
  runnerPort: Options.integer("runner-port").pipe(
    Options.withPseudoName("N"),
    Options.withDescription("The TCP port other runners reach this one on (default: --port + 1)"),
    Options.optional
  ),
  runnerHost: Options.text("runner-host").pipe(
    Options.withDescription("The address other runners reach this one at (default 127.0.0.1)"),
    Options.withDefault("127.0.0.1")
  ),
  clusterDb: Options.text("cluster-db").pipe(
    Options.withPseudoName("URL"),
    Options.withDescription("The PostgreSQL database of the cluster's storage (default: --db when it is postgres://)"),
    Options.optional
  ),
  tokenFile: Options.text("token-file").pipe(
    Options.withPseudoName("FILE"),
    Options.withDescription(`Bearer tokens, one per line (default: the ${Serve.TOKEN_ENV} variable)`),
    Options.optional
  ),
  maxBody: Options.integer("max-body").pipe(
    Options.withPseudoName("BYTES"),
    Options.withDescription("The largest request body accepted (default 65536)"),
    Options.optional
  ),
  maxIdle: Options.integer("max-idle").pipe(
    Options.withPseudoName("SECONDS"),
    Options.withDescription("An idle session's entity passivates after this time (default 60)"),
    Options.optional
  ),
  maxSteps
}, (o) =>
  Effect.flatMap(tiller, (globals) =>
    Effect.zipRight(
      Output.errorLine(
        `tiller serve: http://${o.host}:${o.port} (runner ${o.runnerHost}:${
          Option.getOrElse(o.runnerPort, () => o.port + 1)
        })`
      ),
      Serve.layer({
        db: globals.db,
        clusterDb: Option.getOrUndefined(o.clusterDb),
        model: globals.model,
        host: o.host,
        port: o.port,
        runnerHost: o.runnerHost,
        runnerPort: Option.getOrElse(o.runnerPort, () => o.port + 1),
        tokenFile: Option.getOrUndefined(o.tokenFile),
        maxBodyBytes: Option.getOrUndefined(o.maxBody),
        maxIdleTime: Option.getOrUndefined(Option.map(o.maxIdle, (seconds) => `${seconds} seconds` as const)),
        maxSteps: Option.getOrUndefined(o.maxSteps)
      }).pipe(Layer.launch)
    ))).pipe(
    Command.withDescription("Run a cluster runner that serves sessions over HTTP/JSON (PostgreSQL for the cluster)")
  )

/** The MCP configuration of the global options. */
const mcpConfigOf = (globals: GlobalOptions) => McpSettings.load(globals.mcp ?? [])

const mcpListCommand = Command.make(
  "list",
  {},
  () => Effect.flatMap(tiller, (globals) => Effect.flatMap(mcpConfigOf(globals), McpCommand.list))
).pipe(
  Command.withDescription(
    "List the configured MCP servers: transport, state, tool and prompt counts, protocol revision; exit code 1 when one fails to start"
  )
)

const serverArg = Args.text({ name: "SERVER" }).pipe(Args.withDescription("A server's name under mcpServers"))

const mcpToolsCommand = Command.make(
  "tools",
  { server: serverArg },
  ({ server }) =>
    Effect.flatMap(
      tiller,
      (globals) => Effect.flatMap(mcpConfigOf(globals), (config) => McpCommand.tools(config, server))
    )
).pipe(
  Command.withDescription("List one MCP server's tools: the name the model sees (mcp__SERVER__TOOL) and the server's")
)

const mcpCallCommand = Command.make(
  "call",
  {
    server: serverArg,
    tool: Args.text({ name: "TOOL" }).pipe(Args.withDescription("The tool's name as the server gives it")),
    json: Args.text({ name: "JSON" }).pipe(
      Args.withDescription("The arguments, one JSON object"),
      Args.withDefault("{}")
    )
  },
  ({ json, server, tool }) =>
    Effect.flatMap(
      tiller,
      (globals) => Effect.flatMap(mcpConfigOf(globals), (config) => McpCommand.call(config, server, tool, json))
    )
).pipe(
  Command.withDescription(
    "Call one tool of an MCP server and print its result; exit code 1 when the tool reports an error"
  )
)

const mcpLoginCommand = Command.make(
  "login",
  {
    server: serverArg,
    timeout: Options.integer("timeout").pipe(
      Options.withSchema(Schema.Int.pipe(Schema.positive())),
      Options.withPseudoName("SECONDS"),
      Options.withDescription("The longest wait for the authorization, in seconds (default 300)"),
      Options.withDefault(300)
    )
  },
  ({ server, timeout }) =>
    Effect.flatMap(
      tiller,
      (globals) => Effect.flatMap(mcpConfigOf(globals), (config) => McpCommand.login(config, server, timeout))
    )
).pipe(
  Command.withDescription(
    "Authorize tiller with an HTTP MCP server configured with \"oauth\": prints the URL to open, waits for the redirect on 127.0.0.1, stores the tokens (mode 0600) in ~/.tiller/mcp-auth (env TILLER_MCP_AUTH_DIR)"
  )
)

const mcpCommand = Command.make("mcp").pipe(
  Command.withDescription(
    "The MCP servers of .mcp.json, .tiller/mcp.json and --mcp: list, tools SERVER, call SERVER TOOL JSON, login SERVER"
  ),
  Command.withSubcommands([mcpListCommand, mcpToolsCommand, mcpCallCommand, mcpLoginCommand])
)

/**
 * The whole command tree.
 *
 * @since 0.1.0
 * @category commands
 */
export const command = tiller.pipe(
  Command.withSubcommands([
    chatCommand,
    runCommand,
    sessionsCommand,
    logCommand,
    checkCommand,
    forkCommand,
    resumeCommand,
    compactCommand,
    approveCommand,
    handoffCommand,
    traceCommand,
    exportCommand,
    serveCommand,
    mcpCommand
  ])
)

const SUBCOMMANDS: ReadonlySet<string> = new Set([
  "chat",
  "run",
  "sessions",
  "log",
  "check",
  "fork",
  "resume",
  "compact",
  "approve",
  "handoff",
  "trace",
  "export",
  "serve",
  "mcp"
])
const GLOBAL_FLAGS: ReadonlySet<string> = new Set(["--no-tools", "--claude-hooks", "--read-session"])
const GLOBAL_VALUED: ReadonlyArray<string> = ["--db", "--model", "--context-window", "--prices", "--mcp"]

/**
 * `argv` with the global options that follow the subcommand moved in front of it, so that
 * `tiller chat --db X --session Y` means `tiller --db X chat --session Y` (@effect/cli reads a
 * parent's options after a subcommand only when no option of the subcommand follows them).
 * Everything after `--` stays where it is.
 *
 * @since 0.1.0
 * @category commands
 */
export const hoistGlobalOptions = (argv: ReadonlyArray<string>): ReadonlyArray<string> => {
  // The subcommand is the first argument that is neither an option nor a global option's value.
  let at = 2
  while (at < argv.length && !SUBCOMMANDS.has(argv[at]!)) at += GLOBAL_VALUED.includes(argv[at]!) ? 2 : 1
  if (at >= argv.length) return argv
  const globals: Array<string> = []
  const rest: Array<string> = []
  for (let i = at + 1; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--") {
      rest.push(...argv.slice(i))
      break
    }
    if (GLOBAL_FLAGS.has(arg) || GLOBAL_VALUED.some((name) => arg.startsWith(`${name}=`))) {
      globals.push(arg)
    } else if (GLOBAL_VALUED.includes(arg) && i + 1 < argv.length) {
      globals.push(arg, argv[++i]!)
    } else {
      rest.push(arg)
    }
  }
  return [...argv.slice(0, at), ...globals, argv[at]!, ...rest]
}

const run = Command.run(command, { name: "tiller", version: "0.1.0" })

/**
 * Parses `argv` (as `process.argv`) and runs the selected command.
 *
 * @since 0.1.0
 * @category commands
 */
export const cli = (argv: ReadonlyArray<string>) => run(hoistGlobalOptions(argv))
