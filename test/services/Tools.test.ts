import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option, Schema, Scope } from "effect"
import { jsonProblem } from "../../src/domain/Json.js"
import { ToolRegistry } from "../../src/internal/loop/ToolRegistry.js"
import type { ToolDefinition } from "../../src/services/Tools.js"
import { Tool, Tools } from "../../src/services/Tools.js"

const Text = Schema.Struct({ text: Schema.String })

const echo = (description = "echoes its text", mode?: "parallel" | "exclusive") =>
  Tool.make("echo", {
    description,
    parameters: Text,
    ...(mode === undefined ? {} : { mode }),
    execute: ({ text }) => Effect.succeed(`echo: ${text}`)
  })

const named = (name: string, mode: "parallel" | "exclusive" = "exclusive") =>
  Tool.make(name, {
    description: `tool ${name}`,
    parameters: Schema.Struct({}),
    mode,
    execute: () => Effect.succeed("ok")
  })

const registry = Effect.flatMap(Tools, ToolRegistry.fromToolsOrDie)

const visibleDescription = (name: string) =>
  Effect.gen(function*() {
    const found = (yield* registry).lookup(name)
    return Option.map(Option.fromNullable(found), (tool) => tool.description)
  })

const listed = Effect.map(
  Effect.flatMap(Tools, (tools) => tools.list),
  (list) => list.map((t) => `${t.name}:${t.description}`)
)

const buildExit = (layer: Layer.Layer<Tools>) => Effect.scoped(Effect.exit(Layer.build(layer)))

describe("Tool.make", () => {
  it("defaults the mode to exclusive and keeps every field", () => {
    const tool = echo()
    expect(tool.name).toBe("echo")
    expect(tool.description).toBe("echoes its text")
    expect(tool.parameters).toBe(Text)
    expect(tool.mode).toBe("exclusive")
    expect(Object.isFrozen(tool)).toBe(true)
    expect(echo("d", "parallel").mode).toBe("parallel")
  })

  it.effect("the body receives decoded parameters", () =>
    Effect.gen(function*() {
      const output = yield* echo().execute({ text: "ping" }, {} as never)
      expect(output).toBe("echo: ping")
    }))
})

describe("Tools", () => {
  it.effect("list gives every visible tool sorted by code units with JSON Schema parameters", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      const list = yield* tools.list
      expect(list.map((t) => t.name)).toEqual(["B", "Z", "a", "b", "echo", "é"])
      const echoSchema = list.find((t) => t.name === "echo")
      expect(echoSchema).toEqual({
        name: "echo",
        description: "echoes its text",
        parameters: {
          $schema: "http://json-schema.org/draft-07/schema#",
          type: "object",
          required: ["text"],
          properties: { text: { type: "string" } },
          additionalProperties: false
        }
      })
      for (const schema of list) expect(jsonProblem(schema)).toBeUndefined()
      expect(tools.maxParallelToolCalls).toBe(10)
    }).pipe(
      Effect.provide(Tools.layer({ tools: [named("é"), named("b"), echo(), named("a"), named("Z"), named("B")] }))
    ))

  it.effect("an empty registry lists nothing", () =>
    Effect.gen(function*() {
      expect(yield* (yield* Tools).list).toEqual([])
      expect((yield* registry).lookup("echo")).toBeUndefined()
      expect((yield* registry).modeOf("echo")).toBeUndefined()
    }).pipe(Effect.provide(Tools.layer())))

  it.effect("a later registration shadows an earlier one; closing its scope un-shadows it", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      const outer = yield* Scope.make()
      yield* Scope.extend(tools.register(echo("second")), outer)
      expect(yield* listed).toEqual(["echo:second"])
      expect(yield* visibleDescription("echo")).toEqual(Option.some("second"))

      const inner = yield* Scope.make()
      yield* Scope.extend(tools.register(echo("third")), inner)
      yield* Scope.extend(tools.register(named("extra")), inner)
      expect(yield* listed).toEqual(["echo:third", "extra:tool extra"])

      // Closing the earlier registration's scope removes exactly that one; the latest stays visible.
      yield* Scope.close(outer, Exit.void)
      expect(yield* listed).toEqual(["echo:third", "extra:tool extra"])

      yield* Scope.close(inner, Exit.void)
      expect(yield* listed).toEqual(["echo:first"])
      expect(yield* visibleDescription("echo")).toEqual(Option.some("first"))
      expect(yield* visibleDescription("extra")).toEqual(Option.none())
    }).pipe(Effect.provide(Tools.layer({ tools: [echo("first")] }))))

  it.effect("within options.tools a later entry shadows an earlier one of the same name", () =>
    Effect.gen(function*() {
      expect(yield* listed).toEqual(["echo:b"])
    }).pipe(Effect.provide(Tools.layer({ tools: [echo("a"), echo("b")] }))))

  it.effect("setMode changes the visible tool's mode as the registry reports it at call time", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      const lookups = yield* registry
      expect(lookups.modeOf("echo")).toBe("exclusive")
      yield* tools.setMode("echo", "parallel")
      expect(lookups.modeOf("echo")).toBe("parallel")
      const found = lookups.lookup("echo")
      expect([found?.mode, found?.description]).toEqual(["parallel", "first"])

      const scope = yield* Scope.make()
      yield* Scope.extend(tools.register(echo("shadow", "exclusive")), scope)
      expect(lookups.modeOf("echo")).toBe("exclusive")
      yield* tools.setMode("echo", "parallel")
      expect(lookups.modeOf("echo")).toBe("parallel")
      yield* tools.setMode("echo", "exclusive")
      yield* Scope.close(scope, Exit.void)
      // The un-shadowed registration keeps the mode set while it was visible.
      expect(lookups.modeOf("echo")).toBe("parallel")

      yield* tools.setMode("missing", "parallel")
      expect(lookups.modeOf("missing")).toBeUndefined()
      expect(yield* listed).toEqual(["echo:first"])
    }).pipe(Effect.provide(Tools.layer({ tools: [echo("first")] }))))

  it.effect("the registry is a member of the service and is in the built context", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      expect(Object.keys(tools).sort()).toEqual(["list", "maxParallelToolCalls", "register", "registry", "setMode"])
      const attached = ToolRegistry.fromTools(tools)
      expect(Option.isSome(attached)).toBe(true)
      // Typed away by `Layer.Layer<Tools>`, yet present in the built context.
      expect(yield* Effect.serviceOption(ToolRegistry)).toEqual(attached)
      expect(Option.getOrThrow(attached).lookup("echo")?.name).toBe("echo")
    }).pipe(Effect.provide(Tools.layer({ tools: [echo()] }))))

  it.effect("a hand-written Tools service has no registry", () =>
    Effect.gen(function*() {
      const handWritten = Tools.of({
        register: () => Effect.void,
        setMode: () => Effect.void,
        list: Effect.succeed([]),
        maxParallelToolCalls: 1
      })
      expect(ToolRegistry.fromTools(handWritten)).toEqual(Option.none())
      const exit = yield* Effect.exit(ToolRegistry.fromToolsOrDie(handWritten))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
    }))

  it.effect("layer validates maxParallelToolCalls at build", () =>
    Effect.gen(function*() {
      for (const bad of [0, 1.5, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
        const exit = yield* buildExit(Tools.layer({ maxParallelToolCalls: bad }))
        expect(Exit.isFailure(exit) && Cause.isDie(exit.cause), `maxParallelToolCalls ${bad}`).toBe(true)
      }
      for (const good of [1, 2, 25]) {
        const tools = yield* Effect.provide(Tools, Tools.layer({ maxParallelToolCalls: good }))
        expect(tools.maxParallelToolCalls).toBe(good)
      }
    }))

  it.effect("a tool whose parameters have no JSON Schema dies where it is registered", () =>
    Effect.gen(function*() {
      const opaque: ToolDefinition<Schema.Schema<string>> = Tool.make("opaque", {
        description: "no JSON Schema",
        parameters: Schema.declare((u): u is string => typeof u === "string"),
        execute: () => Effect.succeed("")
      })
      const built = yield* buildExit(Tools.layer({ tools: [opaque] }))
      expect(Exit.isFailure(built) && Cause.isDie(built.cause)).toBe(true)

      const registered = yield* Effect.exit(Effect.scoped(Effect.flatMap(Tools, (tools) => tools.register(opaque))))
      expect(Exit.isFailure(registered) && Cause.isDie(registered.cause)).toBe(true)
      expect(yield* listed).toEqual([])
    }).pipe(Effect.provide(Tools.layer())))
})

describe("Tool.fromJsonSchema", () => {
  it.effect("offers its JSON Schema as given ($defs and $ref kept); the body gets the arguments object", () =>
    Effect.gen(function*() {
      const parameters = {
        type: "object",
        properties: { point: { $ref: "#/$defs/Point" } },
        required: ["point"],
        $defs: { Point: { type: "object", properties: { x: { type: "number" } } } }
      }
      const tool = Tool.fromJsonSchema("plot", {
        description: "plots a point",
        parameters,
        execute: (args) => Effect.succeed(JSON.stringify(args))
      })
      const listed = yield* Effect.flatMap(Tools, (tools) => tools.list).pipe(
        Effect.provide(Tools.layer({ tools: [tool] }))
      )
      expect(listed).toEqual([{ name: "plot", description: "plots a point", parameters }])
      expect(tool.mode).toBe("exclusive")
      const out = yield* tool.execute({ point: { x: 1 } }, {} as any)
      expect(out).toBe(`{"point":{"x":1}}`)
      expect(Schema.decodeUnknownEither(tool.parameters)([1])._tag).toBe("Left")
    }))
})
