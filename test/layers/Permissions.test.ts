import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Permissions } from "../../src/layers/Permissions.js"

/** A temporary project holding `files`. */
const project = (files: Readonly<Record<string, string>>): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-permissions-"))
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true })
    fs.writeFileSync(path.join(dir, name), text)
  }
  return dir
}

describe("Permissions.load", () => {
  it.effect("reads the rules of the settings files the hook bridge reads, in order, then the given ones; the last defaultMode wins", () =>
    Effect.gen(function*() {
      const home = project({
        ".claude/settings.json": JSON.stringify({ permissions: { deny: ["Bash(rm:*)"], defaultMode: "plan" } })
      })
      const dir = project({
        ".claude/settings.json": JSON.stringify({
          permissions: { allow: ["Edit(src/**)"], defaultMode: "acceptEdits" }
        }),
        ".tiller/settings.json": JSON.stringify({ permissions: { ask: ["Bash(git push:*)"] } })
      })
      const without = yield* Permissions.load({ cwd: dir, home })
      expect(without.rules.map((r) => r.text)).toEqual(["Bash(git push:*)"])
      expect(without.mode).toBe("default")
      const all = yield* Permissions.load({
        cwd: dir,
        home,
        claudeSettings: true,
        rules: { allow: ["Bash(npm test:*)"] }
      })
      expect(
        all.rules.map((r) =>
          `${r.behavior} ${r.text} ${r.origin === "command line" ? r.origin : path.relative(dir, r.origin)}`
        )
      ).toEqual([
        `deny Bash(rm:*) ${path.relative(dir, path.join(home, ".claude", "settings.json"))}`,
        "allow Edit(src/**) .claude/settings.json",
        "ask Bash(git push:*) .tiller/settings.json",
        "allow Bash(npm test:*) command line"
      ])
      expect(all.mode).toBe("acceptEdits")
      expect((yield* Permissions.load({ cwd: dir, home, claudeSettings: true, mode: "default" })).mode).toBe("default")
    }))

  it.effect("bypassPermissions from a settings file is ignored with a warning; malformed settings and rules are refused", () =>
    Effect.gen(function*() {
      const bypass = project({
        ".tiller/settings.json": JSON.stringify({ permissions: { defaultMode: "bypassPermissions" } })
      })
      const loaded = yield* Permissions.load({ cwd: bypass })
      expect(loaded.mode).toBe("default")
      expect(loaded.warnings).toEqual([
        `${
          path.join(bypass, ".tiller", "settings.json")
        }: defaultMode bypassPermissions is ignored; bypassing permissions takes --permission-mode bypassPermissions or --dangerously-skip-permissions`
      ])
      const broken = project({ ".tiller/settings.json": "{ not json" })
      expect((yield* Effect.flip(Permissions.load({ cwd: broken })))._tag).toBe("PermissionConfigError")
      const badRule = project({ ".tiller/settings.json": JSON.stringify({ permissions: { deny: ["Bash()"] } }) })
      expect((yield* Effect.flip(Permissions.load({ cwd: badRule }))).message).toContain(
        "permissions.deny: \"Bash()\" has empty parentheses"
      )
      const notList = project({ ".tiller/settings.json": JSON.stringify({ permissions: { allow: "Bash" } }) })
      expect((yield* Effect.flip(Permissions.load({ cwd: notList }))).message).toContain(
        "permissions.allow must be a list of rules"
      )
      expect((yield* Effect.flip(Permissions.load({ noFiles: true, rules: { allow: ["(x)"] } }))).message).toContain(
        "is not a rule"
      )
    }))

  it.effect("decide reads a file tool's real path: a link to a denied file is denied", () =>
    Effect.gen(function*() {
      const dir = project({ ".env": "KEY=1\n" })
      fs.symlinkSync(path.join(dir, ".env"), path.join(dir, "innocent.txt"))
      const resolved = yield* Permissions.load({ noFiles: true, cwd: dir, rules: { deny: ["Read(./.env)"] } })
      const outcome = yield* Permissions.decide(resolved, { tool: "Read", input: { file_path: "innocent.txt" } }, {
        cwd: dir,
        home: "/nowhere"
      })
      expect(outcome.behavior).toBe("deny")
      expect(outcome.reason).toBe("Read is denied by the deny rule \"Read(./.env)\" (command line)")
    }))
})
