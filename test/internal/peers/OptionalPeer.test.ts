/**
 * Optional peers: the missing package is recognised in Node's and CommonJS's wording, the message
 * carries the install line of the package's advertised ranges, and any other failure passes as it is.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as OptionalPeer from "../../../src/internal/peers/OptionalPeer.js"

const pkg = JSON.parse(fs.readFileSync(path.resolve(import.meta.dirname, "../../../package.json"), "utf8")) as {
  readonly peerDependencies: Readonly<Record<string, string>>
  readonly peerDependenciesMeta: Readonly<Record<string, { readonly optional?: boolean }>>
}

/** The error Node's ES module loader throws for a package that is not installed. */
const notFound = (name: string) =>
  Object.assign(
    new Error(`Cannot find package '${name}' imported from /app/node_modules/tiller/dist/layers/SqliteStore.js`),
    {
      code: "ERR_MODULE_NOT_FOUND"
    }
  )

describe("OptionalPeer", () => {
  it("each feature's packages are optional peers of package.json with the same ranges", () => {
    for (const peers of [OptionalPeer.SQLITE, OptionalPeer.OPENTELEMETRY]) {
      for (const [name, range] of peers.packages) {
        expect(pkg.peerDependencies[name], name).toBe(range)
        expect(pkg.peerDependenciesMeta[name]?.optional, name).toBe(true)
      }
    }
  })

  it("recognises a missing package, a missing subpath and CommonJS's wording; not other failures", () => {
    expect(OptionalPeer.missingPeer(OptionalPeer.SQLITE, notFound("better-sqlite3"))).toBe("better-sqlite3")
    expect(OptionalPeer.missingPeer(OptionalPeer.SQLITE, notFound("@effect/sql-sqlite-node/SqliteClient"))).toBe(
      "@effect/sql-sqlite-node"
    )
    expect(OptionalPeer.missingPeer(OptionalPeer.SQLITE, new Error("Cannot find module 'better-sqlite3'"))).toBe(
      "better-sqlite3"
    )
    // A missing package that is not one of the feature's, and failures of another kind.
    expect(OptionalPeer.missingPeer(OptionalPeer.SQLITE, notFound("effect"))).toBeUndefined()
    expect(OptionalPeer.missingPeer(OptionalPeer.SQLITE, notFound("better-sqlite3-extra"))).toBeUndefined()
    expect(
      OptionalPeer.missingPeer(
        OptionalPeer.SQLITE,
        new Error("The module was compiled against a different Node.js version")
      )
    ).toBeUndefined()
  })

  it("the message names the feature, the missing package and the install line", () => {
    expect(OptionalPeer.missingMessage(OptionalPeer.SQLITE, notFound("better-sqlite3"))).toBe(
      "the SQLite store needs the optional peer dependencies of tiller @effect/sql-sqlite-node, @effect/sql, better-sqlite3, " +
        "and better-sqlite3 is not installed: npm install @effect/sql-sqlite-node@^0.53.0 @effect/sql@^0.52.1 better-sqlite3@^12.11.1"
    )
  })

  it.effect("load fails with the install line when a peer is missing, and with the import's own error otherwise", () =>
    Effect.gen(function*() {
      const missing = yield* Effect.flip(
        OptionalPeer.load(OptionalPeer.SQLITE, () => Promise.reject(notFound("better-sqlite3")), (cause) => cause)
      )
      expect(missing).toBeInstanceOf(Error)
      expect((missing as Error).message).toContain("npm install @effect/sql-sqlite-node@^0.53.0")
      expect((missing as Error).cause).toMatchObject({ code: "ERR_MODULE_NOT_FOUND" })
      const other = new Error("boom")
      expect(yield* Effect.flip(OptionalPeer.load(OptionalPeer.SQLITE, () => Promise.reject(other), (cause) => cause)))
        .toBe(other)
      expect(yield* OptionalPeer.load(OptionalPeer.SQLITE, () => Promise.resolve(7), (cause) => cause)).toBe(7)
    }))
})
