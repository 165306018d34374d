import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { EventOf } from "../../src/domain/Event.js"
import * as CodingTools from "../../src/layers/CodingTools.js"
import { Permissions } from "../../src/layers/Permissions.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { scenario, user } from "../agent/harness.js"

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

  it.effect("bypassPermissions from a settings file is ignored with a warning; a file that is not JSON is skipped with a warning; malformed rules are refused", () =>
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
      const skipped = yield* Permissions.load({ cwd: broken, rules: { deny: ["Bash(rm:*)"] } })
      expect(skipped.rules.map((r) => r.text)).toEqual(["Bash(rm:*)"])
      expect(skipped.warnings).toEqual([
        expect.stringMatching(/settings\.json is not valid JSON \(.+\); its permission rules are skipped$/)
      ])
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

describe("Permissions on the searches", () => {
  it.live("a Read deny rule hides the file from Glob and Grep results, in every output mode", () => {
    const dir = project({
      ".env": "API_KEY=sk-secret-value\n",
      "config/.env": "OTHER_KEY=sk-second-secret\n",
      "src/app.ts": "const API_KEY = process.env.API_KEY\n",
      "README.md": "Set API_KEY in .env\n"
    })
    const call = (id: string, name: string, args: Record<string, unknown>) => ({ id, name, arguments: args })
    const script = [
      ScriptedModel.response({
        toolCalls: [
          call("g1", "Grep", { pattern: "API_KEY|OTHER_KEY", output_mode: "content" }),
          call("g2", "Grep", { pattern: "sk-", output_mode: "files_with_matches" }),
          call("g3", "Grep", { pattern: "KEY", output_mode: "count" }),
          call("g4", "Glob", { pattern: "**/.env*" }),
          call("g5", "Glob", { pattern: "**/*" }),
          call("g6", "Grep", { pattern: "KEY", path: ".env" })
        ]
      }),
      ScriptedModel.text("done")
    ]
    return Effect.gen(function*() {
      const tools = yield* CodingTools.make({ cwd: dir })
      const layer = Permissions.layer({ cwd: dir, noFiles: true, rules: { deny: ["Read(./.env)", "Read(**/.env)"] } })
        .pipe(Layer.provideMerge(scenario(script, { tools })))
      const events = yield* Effect.provide(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("p1", "find the keys"))
          yield* driver.whenIdle
          return yield* Effect.flatMap(SessionLog, (log) => log.events)
        }),
        layer
      )
      const results = events.filter((e) => e.type === "tool/result").map((e) => (e as EventOf<"tool/result">).data)
      const texts = results.map((r) =>
        r.message.content[0].content.map((b) => (b.type === "text" ? b.text : "")).join("")
      )
      for (const text of texts.slice(0, 5)) {
        expect(text).not.toContain("sk-secret-value")
        expect(text).not.toContain("sk-second-secret")
        expect(text).not.toMatch(/\/\.env\b/)
      }
      expect(texts[0]).toContain(`${path.join(fs.realpathSync(dir), "src", "app.ts")}:1:const API_KEY`)
      expect(texts[0]).toContain("[2 files hidden by a Read deny rule]")
      expect(texts[1]).toBe("No matches found\n[2 files hidden by a Read deny rule]")
      expect(texts[2]).toContain("app.ts:1")
      expect(texts[3]).toBe("No files found\n[2 files hidden by a Read deny rule]")
      expect(texts[4]).toContain("README.md")
      expect(texts[5]).toContain("permission denied: Grep is denied by the deny rule \"Read(./.env)\"")
      expect((results[0]!.meta as any).toolResponse).toMatchObject({ mode: "content", numFiles: 2, numLines: 2 })
      expect((results[0]!.meta as any).toolResponse.filenames.map((f: string) => path.basename(f)).sort()).toEqual([
        "README.md",
        "app.ts"
      ])
    })
  })
})
