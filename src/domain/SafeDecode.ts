/**
 * Schema decoding that never throws on JSON input.
 *
 * Effect's union parser reads a tag field with `String(value)`, which throws on a JSON object whose
 * own `toString` key is not a function (`{"toString": null}` is valid JSON) or on an array holding
 * one. Such a value is never the literal a tag asks for, so the throw becomes an ordinary refusal.
 *
 * @since 0.1.0
 */
import { Either, ParseResult, Schema } from "effect"
import type { ParseOptions } from "effect/SchemaAST"

/**
 * `Schema.decodeUnknownEither(schema, options)`, with a throw while decoding returned as a parse
 * failure of the whole input ("not decodable: ...").
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeUnknownEither = <A, I>(schema: Schema.Schema<A, I>, options?: ParseOptions) => {
  const decode = Schema.decodeUnknownEither(schema, options)
  return (input: unknown): Either.Either<A, ParseResult.ParseError> => {
    try {
      return decode(input)
    } catch (cause) {
      const message = cause instanceof Error ? cause.message : String(cause)
      return Either.left(ParseResult.parseError(new ParseResult.Type(schema.ast, input, `not decodable: ${message}`)))
    }
  }
}
