/**
 * The price table the CLI bills with: tiller's table (`domain/Prices`), overridden by `prices` in
 * `.tiller/settings.json` of the working directory, then by the JSON file of `--prices FILE`
 * (env `TILLER_PRICES`). Each override is an object from model name to
 * `{input, output, cacheRead?, cacheWrite?}` in US dollars per million tokens; a file that is not
 * such an object is a `CliError` naming it.
 *
 * @since 0.1.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Effect, Either, Option, ParseResult, Schema } from "effect"
import type { PriceTable } from "../domain/Prices.js"
import * as Prices from "../domain/Prices.js"
import { CliError } from "./CliError.js"

const Settings = Schema.Struct({ prices: Schema.optional(Prices.PriceTable) })

/** Reads a JSON file; `undefined` when it does not exist (and `optional`). */
const readJson = (file: string, optional: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const read = yield* fs.readFileString(file).pipe(
      Effect.map(Option.some),
      Effect.catchAll((error) =>
        optional && error._tag === "SystemError" && error.reason === "NotFound"
          ? Effect.succeedNone
          : Effect.fail(new CliError({ reason: `cannot read the prices in ${file}: ${error.message}` }))
      )
    )
    if (Option.isNone(read)) return undefined
    const text = read.value
    const parsed = Either.try(() => JSON.parse(text) as unknown)
    if (Either.isLeft(parsed)) return yield* new CliError({ reason: `${file} is not valid JSON` })
    return parsed.right
  })

const decodeWith = <A, I>(schema: Schema.Schema<A, I>, file: string, value: unknown) =>
  Schema.decodeUnknown(schema)(value).pipe(
    Effect.mapError((error) =>
      new CliError({ reason: `invalid prices in ${file}: ${ParseResult.TreeFormatter.formatErrorSync(error)}` })
    )
  )

/**
 * The price table for the CLI: tiller's, then `.tiller/settings.json`'s `prices`, then the file of
 * `--prices` (when given).
 *
 * @since 0.1.0
 * @category constructors
 */
export const load = (
  pricesFile: string | undefined
): Effect.Effect<PriceTable, CliError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const settingsFile = path.join(process.cwd(), ".tiller", "settings.json")
    const settings = yield* readJson(settingsFile, true)
    const fromSettings = settings === undefined
      ? undefined
      : (yield* decodeWith(Settings, settingsFile, settings)).prices
    const fromFile = pricesFile === undefined
      ? undefined
      : yield* Effect.flatMap(readJson(pricesFile, false), (json) => decodeWith(Prices.PriceTable, pricesFile, json))
    return Prices.withOverrides(Prices.PRICES, fromSettings, fromFile)
  })
