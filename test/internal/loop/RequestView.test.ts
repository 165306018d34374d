import { describe, expect, it } from "@effect/vitest"
import * as GrowOnly from "../../../src/domain/GrowOnly.js"
import { SessionId, userMessage } from "../../../src/index.js"
import type { Message } from "../../../src/index.js"
import * as RequestView from "../../../src/internal/loop/RequestView.js"

const fields = {
  sessionId: SessionId.make("s"),
  turn: 1,
  step: 2,
  attempt: 1,
  provider: "p",
  model: "m",
  tools: []
}

const message = (n: number): Message => userMessage({ id: `m${n}`, text: `text ${n}` })

describe("RequestView", () => {
  it("messages are the history at the request, even when the vector grows in place afterwards", () => {
    const history = GrowOnly.push(GrowOnly.push(GrowOnly.empty<Message>(), message(1)), message(2))
    const request = RequestView.make(fields, history)
    // The tip version grows in place: the shared buffer now holds a third element.
    const longer = GrowOnly.push(history, message(3))
    expect(longer.buffer).toBe(history.buffer)
    expect(request.messages.map((m) => m.id)).toEqual(["m1", "m2"])
    expect(GrowOnly.toArray(longer).map((m) => m.id)).toEqual(["m1", "m2", "m3"])
  })

  it("making a request copies nothing: the history is copied on the first read of messages only", () => {
    let copies = 0
    const items = [message(1), message(2)]
    // A vector whose backing array counts the copies taken of it.
    const buffer = new Proxy(items, {
      get: (target, key, receiver) => {
        if (key === "slice") copies++
        return Reflect.get(target, key, receiver)
      }
    })
    const request = RequestView.make(fields, { buffer, length: 2 })
    expect(copies).toBe(0)
    expect(request.messages.map((m) => m.id)).toEqual(["m1", "m2"])
    expect(copies).toBe(1)
    void request.messages
    expect(copies).toBe(1)
  })

  it("the first read copies once into a frozen array; later reads return the same array", () => {
    const request = RequestView.make(fields, GrowOnly.fromArray([message(1)]))
    const first = request.messages
    expect(Object.isFrozen(first)).toBe(true)
    expect(request.messages).toBe(first)
  })

  it("the request is frozen and reads like a plain object: spread, JSON and equality see the messages", () => {
    const request = RequestView.make(fields, GrowOnly.fromArray([message(1)]))
    expect(Object.isFrozen(request)).toBe(true)
    expect(Object.keys(request)).toContain("messages")
    expect({ ...request }).toEqual({ ...fields, messages: [message(1)] })
    expect(request).toEqual({ ...fields, messages: [message(1)] })
    expect(JSON.parse(JSON.stringify(request)).messages).toEqual(JSON.parse(JSON.stringify([message(1)])))
    expect(() => {
      ;(request as { step: number }).step = 3
    }).toThrow(TypeError)
  })
})
