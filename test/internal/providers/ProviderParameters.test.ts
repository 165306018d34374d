import { describe, expect, it } from "@effect/vitest"
import { JSONSchema, Schema } from "effect"
import { providerParameters } from "../../../src/internal/providers/ProviderParameters.js"

const of = (schema: Schema.Schema.Any) =>
  providerParameters({ name: "t", description: "", parameters: JSONSchema.make(schema) as any })

describe("providerParameters", () => {
  it("sends a tool without parameters as an object schema without properties", () => {
    expect(of(Schema.Struct({}))).toEqual({ type: "object", properties: {} })
  })

  it("drops the dialect marker and keeps an object schema as it is", () => {
    expect(of(Schema.Struct({ path: Schema.String }))).toEqual({
      type: "object",
      required: ["path"],
      properties: { path: { type: "string" } },
      additionalProperties: false
    })
  })

  it("inlines the definition a top-level $ref names and keeps the $defs for nested references", () => {
    class Point extends Schema.Class<Point>("Point")({ x: Schema.Number }) {}
    const inner = Schema.Struct({ x: Schema.Number }).annotations({ identifier: "Inner" })
    expect(of(Point)).toEqual({
      type: "object",
      required: ["x"],
      properties: { x: { type: "number" } },
      additionalProperties: false,
      $defs: {
        Point: { type: "object", required: ["x"], properties: { x: { type: "number" } }, additionalProperties: false }
      }
    })
    const nested = of(Schema.Struct({ a: inner, b: inner }).annotations({ identifier: "Outer" }))
    expect(nested.type).toBe("object")
    expect(nested.properties).toEqual({ a: { $ref: "#/$defs/Inner" }, b: { $ref: "#/$defs/Inner" } })
    expect(Object.keys(nested.$defs as object).sort()).toEqual(["Inner", "Outer"])
  })

  it("adds empty properties to an object schema that has none, and turns a non-object into one", () => {
    expect(providerParameters({ name: "t", description: "", parameters: { type: "object" } })).toEqual({
      type: "object",
      properties: {}
    })
    expect(providerParameters({ name: "t", description: "", parameters: null })).toEqual({
      type: "object",
      properties: {}
    })
    expect(providerParameters({ name: "t", description: "", parameters: ["x"] })).toEqual({
      type: "object",
      properties: {}
    })
  })

  it("passes any other schema on unchanged (the provider judges it)", () => {
    const union = { anyOf: [{ type: "object", properties: { a: { type: "string" } } }, { type: "string" }] }
    expect(providerParameters({ name: "t", description: "", parameters: union })).toEqual(union)
  })
})
