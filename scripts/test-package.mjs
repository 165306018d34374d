// `npm run test:package`: tiller as an application installs it. Packs the package (after its
// `prepack`: the build and the command line's bundle), installs the tarball into a new folder
// outside the repository together with `effect` from the advertised peer range, and checks, as an
// application would see it:
//   - the tarball's contents (dist, bin, docs; never tests, benchmarks, fixtures or scripts);
//   - without the SQLite peers: the package root imports, a memory-store agent runs, building the
//     SQLite store fails with a PersistenceError saying what to install, and `tiller` says so too;
//   - with them (a) a plain `node` ESM program: Agent.layer over SqliteSessionStore.layer, a
//     ScriptedModel, a tool, inject/followup/steer, SessionExists on a second create, a resume of
//     the stored session and a fork; (b) the same program type-checked by `tsc --noEmit` with strict,
//     NodeNext, exactOptionalPropertyTypes, noPropertyAccessFromIndexSignature, skipLibCheck false
//     and no @types installed; (c) `npx tiller run hello --json`, which writes nothing inside
//     node_modules; (d) `require("tiller")`, refused with a message saying tiller is ESM-only.
// It prints the tarball's size and file count, the app's node_modules size and the cold
// `import("tiller")` time, and ends with the line `N passed, N failed` (exit code 1 on a failure);
// `--report FILE` also writes those counts as JSON (vitest's report fields) for .ci/run.
//
// better-sqlite3 is a native module: when the app gets the version the project built, its compiled
// binding is copied from the project's node_modules (same version, same Node ABI) instead of being
// compiled again for minutes; TILLER_PACKAGE_TEST_COMPILE=1 compiles it as a user's install would.
import { spawnSync } from "node:child_process"
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync
} from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
const work = mkdtempSync(join(tmpdir(), "tiller-package-"))
const app = join(work, "app")
const started = Date.now()
let passed = 0
let failed = 0

const indent = (text) => String(text).trim().split("\n").map((line) => `    ${line}`).join("\n")

/** Runs a command; its output is returned (and shown when it fails). */
const sh = (command, args, options = {}) => {
  const result = spawnSync(command, args, {
    cwd: options.cwd ?? app,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0", ...options.env },
    maxBuffer: 64 * 1024 * 1024,
    timeout: options.timeout ?? 300_000
  })
  return { status: result.status, stdout: result.stdout ?? "", stderr: result.stderr ?? "", error: result.error }
}

/** Throws with the command's output unless it exited 0. */
const ok = (result, what) => {
  if (result.status !== 0) {
    throw new Error(`${what} exited ${result.status ?? result.error}\n${result.stdout}\n${result.stderr}`.trim())
  }
  return result
}

const check = (name, body) => {
  try {
    body()
    passed++
    console.log(`ok    ${name}`)
  } catch (error) {
    failed++
    console.log(`FAIL  ${name}\n${indent(error instanceof Error ? error.message : error)}`)
  }
}

const expect = (condition, message) => {
  if (!condition) throw new Error(message)
}

const megabytes = (bytes) => `${(bytes / 1024 / 1024).toFixed(1)} MB`
const kilobytes = (bytes) => `${(bytes / 1024).toFixed(0)} kB`

/** Bytes on disk under `path` (`du`, as a user measures a folder). */
const diskUsage = (path) => Number(ok(sh("du", ["-sk", path]), "du").stdout.split(/\s/)[0]) * 1024

/** Every file under `path` with its size and modification time: what "nothing written" compares. */
const listing = (path) =>
  readdirSync(path, { recursive: true, withFileTypes: true })
    .filter((entry) => !entry.isDirectory())
    .map((entry) => {
      const file = join(entry.parentPath ?? entry.path, entry.name)
      const stat = statSync(file)
      return `${relative(path, file)} ${stat.size} ${stat.mtimeMs}`
    })
    .sort()
    .join("\n")

const figures = []

// The application: one program in the common subset of JavaScript and TypeScript, run by node as
// app.mjs and type-checked by tsc as app.ts. No Node globals (no @types/node in the app).
const PROGRAM = `import { Console, Effect, Exit, Layer, Schema } from "effect"
import {
  Agent,
  Driver,
  forkSession,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  SqliteSessionStore,
  Tool,
  Tools,
  userMessage
} from "tiller"

const sessionId = SessionId.make("package-test")
const store = SqliteSessionStore.layer({ filename: "sessions.db" })
const model = { provider: "scripted", model: "app" }

const add = Tool.make("add", {
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  execute: ({ a, b }) => Effect.succeed(String(a + b))
})
const tools = Tools.layer({ tools: [add] })

const firstRun = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.inject(userMessage({ id: "ctx", text: "Numbers are small.", source: { kind: "plugin", plugin: "app" } }))
  yield* driver.followup(userMessage({ id: "q1", text: "What is 2 + 3?" }))
  yield* driver.steer(userMessage({ id: "s1", text: "Answer with the number only." }))
  yield* driver.whenIdle
  const history = yield* Effect.flatMap(SessionLog, (log) => log.messages)
  const ids = history.map((m) => String(m.id))
  for (const id of ["ctx", "q1", "s1"]) {
    if (!ids.includes(id)) return yield* Effect.die(new Error("message " + id + " is not in history: " + ids.join(", ")))
  }
  if (!history.some((m) => m.source.kind === "tool")) return yield* Effect.die(new Error("no tool result in history"))
})

const secondRun = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.followup(userMessage({ id: "q2", text: "And again?" }))
  yield* driver.whenIdle
  const history = yield* Effect.flatMap(SessionLog, (log) => log.messages)
  const ids = history.map((m) => String(m.id))
  if (!ids.includes("q1") || !ids.includes("q2")) return yield* Effect.die(new Error("resumed history: " + ids.join(", ")))
  return history.length
})

const program = Effect.gen(function*() {
  yield* Effect.scoped(Layer.build(
    Agent.layer({ sessionId, model }).pipe(
      Layer.provide(Layer.mergeAll(
        ScriptedModel.layer([
          ScriptedModel.response({ text: "Adding.", toolCalls: [{ id: "call-1", name: "add", arguments: { a: 2, b: 3 } }] }),
          ScriptedModel.text("5"),
          ScriptedModel.text("5, as said.")
        ]),
        tools
      )),
      Layer.provide(store)
    )
  ).pipe(Effect.flatMap((context) => Effect.provide(firstRun, context))))

  // The session is stored: creating it again is SessionExists; resuming it continues its log.
  const again = yield* Effect.exit(Effect.scoped(Layer.build(
    Agent.layer({ sessionId, model }).pipe(
      Layer.provide(Layer.mergeAll(ScriptedModel.layer([]), tools)),
      Layer.provide(store)
    )
  )))
  if (Exit.isSuccess(again) || !String(again.cause).includes("SessionExists")) {
    return yield* Effect.die(new Error("creating a stored session again: " + String(again)))
  }

  const messages = yield* Effect.scoped(Layer.build(
    Agent.layer({ resume: sessionId, model }).pipe(
      Layer.provide(Layer.mergeAll(ScriptedModel.layer([ScriptedModel.text("Still 5.")]), tools)),
      Layer.provide(store)
    )
  ).pipe(Effect.flatMap((context) => Effect.provide(secondRun, context))))

  const child = yield* Effect.provide(
    Effect.flatMap(forkSession({ source: sessionId }), (id) => Effect.flatMap(SessionStore, (s) => s.exists(id))),
    store
  )
  if (!child) return yield* Effect.die(new Error("the fork is not stored"))
  yield* Console.log("app ok: " + messages + " messages after the resume")
})

await Effect.runPromise(program)
`

// Without the SQLite peers: the root imports, a memory agent runs, the SQLite layer says what to install.
const MEMORY_PROGRAM = `import { Effect, Layer } from "effect"
import { Agent, Driver, ScriptedModel, SessionId, SessionLog, SessionStore, SqliteSessionStore, Tools, userMessage } from "tiller"

const memory = Agent.layer({ sessionId: SessionId.make("memory"), model: { provider: "scripted", model: "memory" } }).pipe(
  Layer.provide(Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([ScriptedModel.text("hi")]), Tools.layer({ tools: [] })))
)
const count = await Effect.runPromise(Effect.scoped(Effect.provide(Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.followup(userMessage({ id: "m1", text: "hello" }))
  yield* driver.whenIdle
  return (yield* Effect.flatMap(SessionLog, (log) => log.messages)).length
}), memory)))
const failure = await Effect.runPromise(Effect.flip(Effect.scoped(Layer.build(SqliteSessionStore.layer({ filename: "x.db" })))))
console.log(JSON.stringify({ count, tag: failure._tag, message: failure.message }))
`

const TSCONFIG = (lib) => ({
  compilerOptions: {
    target: "ES2022",
    ...(lib === undefined ? {} : { lib }),
    module: "NodeNext",
    moduleResolution: "NodeNext",
    strict: true,
    exactOptionalPropertyTypes: true,
    noPropertyAccessFromIndexSignature: true,
    noUncheckedIndexedAccess: true,
    skipLibCheck: false,
    noEmit: true
  },
  files: ["app.ts"]
})

try {
  console.log(`== pack (prepack: build, command line bundle) into ${work}`)
  ok(sh("npm", ["run", "prepack"], { cwd: root }), "npm run prepack")
  const packed = JSON.parse(
    ok(sh("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", work], { cwd: root }), "npm pack")
      .stdout
  )[0]
  const tarball = join(work, packed.filename)
  figures.push(
    `tarball: ${kilobytes(packed.size)} packed, ${megabytes(packed.unpackedSize)} unpacked, ${packed.entryCount} files`
  )

  check("the tarball ships dist, bin, docs and src, never tests, benchmarks, examples or scripts", () => {
    const paths = packed.files.map((file) => file.path)
    for (
      const needed of [
        "package.json",
        "README.md",
        "dist/index.js",
        "dist/index.d.ts",
        "dist/cli/tiller.mjs",
        "bin/tiller.mjs",
        "bin/esm-only.cjs"
      ]
    ) {
      expect(paths.includes(needed), `${needed} is missing`)
    }
    const stray = paths.filter((path) =>
      /^(test|bench|examples|scripts|src\/cli)\//.test(path) || /\.test\.|\.tsbuildinfo$/.test(path)
    )
    expect(stray.length === 0, `ships ${stray.slice(0, 10).join(", ")}`)
  })

  console.log("== install the tarball with effect from the advertised range")
  mkdirSync(app)
  writeFileSync(
    join(app, "package.json"),
    JSON.stringify({ name: "tiller-app", private: true, type: "module" }, null, 2)
  )
  const npmInstall = (args, options) =>
    ok(
      sh("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...args], options),
      `npm install ${args.join(" ")}`
    )
  npmInstall([tarball, `effect@${pkg.peerDependencies.effect}`])
  const installed = (name) => JSON.parse(readFileSync(join(app, "node_modules", name, "package.json"), "utf8")).version
  figures.push(
    `hello-world app (tiller + effect, memory store): node_modules ${
      megabytes(diskUsage(join(app, "node_modules")))
    }, effect ${installed("effect")}`
  )

  check("without the SQLite peers, better-sqlite3 is neither installed nor compiled, and no esbuild or tsx", () => {
    for (const name of ["better-sqlite3", "@effect/sql-sqlite-node", "esbuild", "tsx", "typescript"]) {
      expect(!existsSync(join(app, "node_modules", name)), `node_modules/${name} is installed`)
    }
  })

  check("one copy of effect, shared with tiller's peers", () => {
    const copies = ok(sh("npm", ["ls", "effect", "--all", "--parseable"]), "npm ls effect").stdout.trim().split("\n")
      .filter((line) => line.endsWith(`${join("node_modules", "effect")}`))
    expect(new Set(copies).size === 1, `copies of effect: ${copies.join(", ")}`)
  })

  // Wall time and the process's CPU time (user + system) of one import in a new process: on a busy
  // machine the wall time waits for a core, the CPU time much less.
  const timeImport = (specifier) => {
    const script =
      `const c = process.cpuUsage(); const t = performance.now(); await import(${JSON.stringify(specifier)}); ` +
      "const u = process.cpuUsage(c); process.stdout.write(JSON.stringify({ wall: performance.now() - t, cpu: (u.user + u.system) / 1000 }))"
    const { cpu, wall } = JSON.parse(
      ok(sh("node", ["--input-type=module", "-e", script]), `import ${specifier}`).stdout
    )
    return `${wall.toFixed(0)} ms (CPU ${cpu.toFixed(0)} ms)`
  }
  const cold = timeImport("tiller")
  const warm = timeImport("tiller")
  figures.push(
    `import("tiller"): ${cold} cold (first run after install), ${warm} again; import("effect") alone: ${
      timeImport("effect")
    }`
  )

  check(
    "memory store without the SQLite peers: an agent runs; SqliteSessionStore.layer fails saying what to install",
    () => {
      writeFileSync(join(app, "memory.mjs"), MEMORY_PROGRAM)
      const output = JSON.parse(ok(sh("node", ["memory.mjs"]), "node memory.mjs").stdout)
      expect(output.count === 2, `history has ${output.count} messages`)
      expect(output.tag === "PersistenceError", `failure ${output.tag}`)
      expect(output.message.includes("npm install @effect/sql-sqlite-node@"), `message: ${output.message}`)
    }
  )

  check("npx tiller without the SQLite peers says what to install", () => {
    const result = sh("npx", ["--no-install", "tiller", "run", "hello", "--json"])
    expect(result.status === 1, `exit ${result.status}\n${result.stdout}\n${result.stderr}`)
    expect(result.stderr.includes("npm install @effect/sql-sqlite-node@"), `stderr: ${result.stderr}`)
  })

  console.log("== add the SQLite peers")
  const projectSqlite =
    JSON.parse(readFileSync(join(root, "node_modules", "better-sqlite3", "package.json"), "utf8")).version
  const reuse = process.env.TILLER_PACKAGE_TEST_COMPILE !== "1"
  const sqliteStarted = Date.now()
  npmInstall([
    ...(reuse ? ["--ignore-scripts"] : []),
    `@effect/sql-sqlite-node@${pkg.peerDependencies["@effect/sql-sqlite-node"]}`,
    `better-sqlite3@${pkg.peerDependencies["better-sqlite3"]}`
  ])
  if (reuse) {
    const binding = join("build", "Release", "better_sqlite3.node")
    if (
      installed("better-sqlite3") === projectSqlite && existsSync(join(root, "node_modules", "better-sqlite3", binding))
    ) {
      mkdirSync(join(app, "node_modules", "better-sqlite3", "build", "Release"), { recursive: true })
      cpSync(
        join(root, "node_modules", "better-sqlite3", binding),
        join(app, "node_modules", "better-sqlite3", binding)
      )
      console.log(`better-sqlite3 ${projectSqlite}: binding copied from the project's build (same version, same Node)`)
    } else {
      ok(sh("npm", ["rebuild", "better-sqlite3"]), "npm rebuild better-sqlite3")
      console.log(`better-sqlite3 ${installed("better-sqlite3")}: compiled`)
    }
  }
  console.log(`SQLite peers installed in ${((Date.now() - sqliteStarted) / 1000).toFixed(0)} s`)
  figures.push(`with the SQLite peers: node_modules ${megabytes(diskUsage(join(app, "node_modules")))}`)

  const tillerBefore = listing(join(app, "node_modules", "tiller"))

  check(
    "(a) node runs the ESM program: SQLite store, scripted model, a tool, inject/followup/steer, resume, fork",
    () => {
      writeFileSync(join(app, "app.mjs"), PROGRAM)
      const result = ok(sh("node", ["app.mjs"]), "node app.mjs")
      expect(result.stdout.includes("app ok"), result.stdout)
      expect(
        !/Executing an Effect versioned/.test(result.stdout + result.stderr),
        `two versions of effect:\n${result.stderr}`
      )
    }
  )

  const tsc = join(root, "node_modules", "typescript", "bin", "tsc")
  check(
    "(b) tsc --noEmit: strict, NodeNext, exactOptionalPropertyTypes, noPropertyAccessFromIndexSignature, skipLibCheck false, no @types",
    () => {
      expect(
        !existsSync(join(app, "node_modules", "@types")),
        `node_modules/@types: ${
          existsSync(join(app, "node_modules", "@types"))
            ? readdirSync(join(app, "node_modules", "@types")).join(", ")
            : ""
        }`
      )
      writeFileSync(join(app, "app.ts"), PROGRAM)
      writeFileSync(join(app, "tsconfig.json"), JSON.stringify(TSCONFIG(undefined), null, 2))
      const started = Date.now()
      ok(sh("node", [tsc, "-p", "tsconfig.json"]), "tsc")
      figures.push(`tsc --noEmit of the app (skipLibCheck false): ${((Date.now() - started) / 1000).toFixed(1)} s`)
    }
  )

  // Effect's own declarations name AbortSignal, URL and ReadableStream, which come from the DOM lib
  // (in the default lib) or @types/node: with lib ES2022 alone only those errors may appear, none in
  // tiller's declarations or the app.
  check("(b) with lib [\"ES2022\"] only: no error outside effect's own declarations", () => {
    writeFileSync(join(app, "tsconfig.es2022.json"), JSON.stringify(TSCONFIG(["ES2022"]), null, 2))
    const result = sh("node", [tsc, "-p", "tsconfig.es2022.json"])
    const errors = result.stdout.split("\n").filter((line) => /error TS/.test(line))
    const ours = errors.filter((line) => !/^node_modules\/(effect|@effect\/[^/]+)\//.test(line))
    expect(ours.length === 0, ours.join("\n"))
  })

  check("(c) npx tiller run hello --json", () => {
    const result = ok(sh("npx", ["--no-install", "tiller", "run", "hello", "--json"]), "npx tiller run hello --json")
    const events = result.stdout.trim().split("\n").map((line) => JSON.parse(line))
    const last = events.at(-1)
    expect(last?.type === "turn/end" && last.data.reason.kind === "completed", `last event: ${JSON.stringify(last)}`)
    expect(existsSync(join(app, ".tiller", "sessions.db")), "no .tiller/sessions.db in the app's folder")
  })

  check("(c) the command line wrote nothing inside node_modules/tiller", () => {
    const after = listing(join(app, "node_modules", "tiller"))
    expect(after === tillerBefore, "node_modules/tiller changed")
    expect(!existsSync(join(app, "node_modules", ".cache")), "node_modules/.cache was written")
  })

  check("(d) require(\"tiller\") fails saying tiller is ESM-only", () => {
    const result = sh("node", ["-e", "require('tiller')"])
    expect(result.status !== 0, "require succeeded")
    expect(result.stderr.includes("tiller is ESM-only"), result.stderr)
  })
} catch (error) {
  failed++
  console.log(`FAIL  the package test stopped\n${indent(error instanceof Error ? error.message : error)}`)
}

for (const line of figures) console.log(line)
console.log(`test:package took ${((Date.now() - started) / 1000).toFixed(0)} s`)
if (failed === 0) rmSync(work, { recursive: true, force: true })
else console.log(`left for inspection: ${work}`)
// `--report FILE`: the counts in the shape of vitest's JSON report, for .ci/run's final line.
const reportAt = process.argv.indexOf("--report")
if (reportAt !== -1) {
  writeFileSync(process.argv[reportAt + 1], JSON.stringify({ numPassedTests: passed, numFailedTests: failed }))
}
console.log(`${passed} passed, ${failed} failed`)
process.exit(failed === 0 ? 0 : 1)
