/**
 * MCP content in tiller's terms: a tool result as a tool output (text, images as image blocks,
 * `structuredContent` kept in `meta` and rendered as text, `isError` as an error result), a read
 * resource and a prompt's messages as message content.
 *
 * @since 0.1.0
 */
import type { Json } from "../../domain/Json.js"
import { jsonProblem } from "../../domain/Json.js"
import type { ToolOutput } from "../../domain/Tool.js"
import type { ImageBlock, TextBlock } from "../../domain/Values.js"

/**
 * An MCP content block as the protocol sends it (the fields tiller reads).
 *
 * @since 0.1.0
 * @category models
 */
export interface McpContentBlock {
  readonly type: string
  readonly text?: string
  readonly data?: string
  readonly mimeType?: string
  readonly uri?: string
  readonly name?: string
  readonly resource?: McpResourceContents
}

/**
 * The contents of a resource as `resources/read` or an embedded resource gives them.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpResourceContents {
  readonly uri: string
  readonly mimeType?: string
  readonly text?: string
  readonly blob?: string
}

/**
 * A `tools/call` result (the fields tiller reads).
 *
 * @since 0.1.0
 * @category models
 */
export interface McpToolResult {
  readonly content?: ReadonlyArray<McpContentBlock>
  readonly structuredContent?: unknown
  readonly isError?: boolean
}

/**
 * The `meta` key of a tool result under which an MCP call records its server, tool,
 * `structuredContent` and the elicitations it answered.
 *
 * @since 0.1.0
 * @category constants
 */
export const META_KEY = "mcp"

type Block = TextBlock | ImageBlock

const text = (value: string): TextBlock => ({ type: "text", text: value })

/** The blocks of resource contents: text as text, an image blob as an image, another blob as a note. */
export const resourceBlocks = (contents: McpResourceContents): ReadonlyArray<Block> => {
  if (contents.text !== undefined) return [text(contents.text)]
  if (contents.blob !== undefined && contents.mimeType?.startsWith("image/") === true) {
    return [{ type: "image", mediaType: contents.mimeType, data: contents.blob }]
  }
  const size = contents.blob === undefined ? 0 : Math.floor(contents.blob.length * 3 / 4)
  return [text(`[resource ${contents.uri}: ${contents.mimeType ?? "binary"}, about ${size} bytes, not shown]`)]
}

/**
 * The blocks of MCP content: text and images as they are, audio, resource links and embedded
 * resources described or inlined as text.
 *
 * @since 0.1.0
 * @category constructors
 */
export const contentBlocks = (content: ReadonlyArray<McpContentBlock>): ReadonlyArray<Block> =>
  content.flatMap((block): ReadonlyArray<Block> => {
    switch (block.type) {
      case "text":
        return [text(block.text ?? "")]
      case "image":
        return block.data === undefined
          ? []
          : [{ type: "image", mediaType: block.mimeType ?? "image/png", data: block.data }]
      case "audio":
        return [text(`[audio: ${block.mimeType ?? "unknown type"}, not shown]`)]
      case "resource_link":
        return [text(`[resource link: ${block.name ?? ""} ${block.uri ?? ""}]`.replace("  ", " "))]
      case "resource":
        return block.resource === undefined ? [] : [
          text(`[resource ${block.resource.uri}]`),
          ...resourceBlocks(block.resource)
        ]
      default:
        return [text(`[${block.type} content, not shown]`)]
    }
  })

/** The scalar leaves of a JSON value, as text. */
const leaves = (value: Json): ReadonlyArray<string> =>
  value === null || typeof value !== "object"
    ? [String(value)]
    : Array.isArray(value)
    ? value.flatMap(leaves)
    : Object.values(value).flatMap(leaves)

/**
 * Whether `content` already tells the model what `structured` says: one of its text blocks is
 * that JSON, or every scalar of it appears in the text.
 */
const rendersStructured = (content: ReadonlyArray<Block>, structured: Json): boolean => {
  const texts = content.flatMap((b) => (b.type === "text" ? [b.text] : []))
  const json = JSON.stringify(structured)
  const same = texts.some((t) => {
    try {
      return JSON.stringify(JSON.parse(t)) === json
    } catch {
      return false
    }
  })
  if (same) return true
  const all = texts.join("\n")
  return texts.length > 0 && leaves(structured).every((leaf) => all.includes(leaf))
}

/**
 * A tool result as a tool output; `extra` (the server and tool, elicitations) goes into `meta`
 * beside `structuredContent`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const toolOutput = (result: McpToolResult, extra: { readonly [key: string]: Json }): ToolOutput => {
  const blocks = [...contentBlocks(result.content ?? [])]
  const meta: Record<string, Json> = { ...extra }
  if (
    result.structuredContent !== undefined && jsonProblem(result.structuredContent, "structuredContent") === undefined
  ) {
    const structured = result.structuredContent as Json
    meta["structuredContent"] = structured
    if (!rendersStructured(blocks, structured)) {
      blocks.push(text(`structured content: ${JSON.stringify(structured, null, 2)}`))
    }
  }
  if (blocks.length === 0) {
    blocks.push(text(result.isError === true ? "(the tool failed with no content)" : "(no content)"))
  }
  return { content: blocks, ...(result.isError === true ? { isError: true } : {}), meta: { [META_KEY]: meta } }
}
