/**
 * Exact optional fields: absent or present with a value, never `undefined`
 * (matches `exactOptionalPropertyTypes` and the lossless JSON rule).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * An optional field that is either absent or holds a value of `schema`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const optional = <S extends Schema.Schema.All>(schema: S) => Schema.optionalWith(schema, { exact: true })
