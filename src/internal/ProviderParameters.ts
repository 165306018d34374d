/**
 * A tool's parameter JSON Schema as providers receive it.
 *
 * @since 0.1.0
 */
import { Predicate } from "effect"
import type { ToolSchema } from "../domain/Values.js"

const OBJECT_WITHOUT_PROPERTIES: Readonly<Record<string, unknown>> = Object.freeze({ type: "object", properties: {} })

/**
 * The parameters of `schema` for a provider request: the JSON Schema without its `$schema` dialect
 * marker (the log keeps `JSONSchema.make`'s output whole; providers want the bare schema), or an
 * object schema without properties when the parameters are not a JSON object.
 *
 * @since 0.1.0
 * @category conversions
 */
export const providerParameters = (schema: ToolSchema): Readonly<Record<string, unknown>> => {
  if (!Predicate.isRecord(schema.parameters)) return OBJECT_WITHOUT_PROPERTIES
  if (!("$schema" in schema.parameters)) return schema.parameters
  const { $schema: _dialect, ...parameters } = schema.parameters
  return parameters
}
