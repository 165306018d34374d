/**
 * A tool's parameter JSON Schema as providers receive it: both the OpenAI and the Anthropic APIs
 * require a top-level `{"type": "object", ...}`.
 *
 * @since 0.1.0
 */
import { Predicate } from "effect"
import type { ToolSchema } from "../../domain/Values.js"

const OBJECT_WITHOUT_PROPERTIES: Readonly<Record<string, unknown>> = Object.freeze({ type: "object", properties: {} })

type JsonObject = Readonly<Record<string, unknown>>

/** The definition a top-level `$ref` of the form `#/$defs/NAME` (or `#/definitions/NAME`) names. */
const referenced = (schema: JsonObject): JsonObject | undefined => {
  const ref = schema.$ref
  if (!Predicate.isString(ref)) return undefined
  const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref)
  if (match === null) return undefined
  const defs = schema[match[1]!]
  if (!Predicate.isRecord(defs)) return undefined
  const definition = defs[decodeURIComponent(match[2]!.replace(/~1/g, "/").replace(/~0/g, "~"))]
  return Predicate.isRecord(definition) ? definition : undefined
}

/**
 * The parameters of `schema` for a provider request (the log keeps `JSONSchema.make`'s output
 * whole):
 * - the `$schema` dialect marker and the top-level `$id` are dropped;
 * - a top-level `$ref` into `$defs` (a `Schema.Class` or an identified struct) is replaced by the
 *   definition it names, the `$defs` kept beside it for nested references;
 * - an object schema gets `properties: {}` when it has none;
 * - `Schema.Struct({})` (rendered as `anyOf` object or array) and parameters that are no JSON
 *   object become `{"type": "object", "properties": {}}`; any other schema is sent as it is.
 *
 * @since 0.1.0
 * @category conversions
 */
export const providerParameters = (schema: ToolSchema): JsonObject => {
  if (!Predicate.isRecord(schema.parameters)) return OBJECT_WITHOUT_PROPERTIES
  const { $id: _id, $ref: _ref, $schema: _dialect, ...rest } = schema.parameters
  const definition = referenced(schema.parameters)
  const body: JsonObject = definition === undefined ? rest : { ...definition, ...defsOf(rest) }
  if (body.type !== "object") return isEmptyStruct(body) ? OBJECT_WITHOUT_PROPERTIES : body
  return Predicate.isRecord(body.properties) ? body : { ...body, properties: {} }
}

const defsOf = (schema: JsonObject): JsonObject => {
  const out: Record<string, unknown> = {}
  if (schema.$defs !== undefined) out.$defs = schema.$defs
  if (schema.definitions !== undefined) out.definitions = schema.definitions
  return out
}

/** `Schema.Struct({})` as `JSONSchema.make` renders it: `anyOf` bare `{type}` members, nothing else. */
const isEmptyStruct = (schema: JsonObject): boolean =>
  Object.keys(schema).every((key) => key === "anyOf") && Array.isArray(schema.anyOf) &&
  schema.anyOf.every((member) => Predicate.isRecord(member) && Object.keys(member).every((key) => key === "type"))
