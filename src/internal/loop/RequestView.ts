/**
 * A model request whose `messages` are read from the log's history only when a model reads them.
 *
 * @since 0.1.0
 */
import * as GrowOnly from "../../domain/GrowOnly.js"
import type { ModelRequest } from "../../domain/ModelRequest.js"
import type { Message } from "../../domain/Values.js"

/**
 * The frozen request of `fields` whose `messages` are the elements of `history`, copied into a
 * frozen array on the first read. A version's elements never change (`GrowOnly` writes past its
 * length only), so a later read sees exactly what a copy taken now would hold; a model that never
 * reads the history, or a recorder that keeps the request, holds no copy of it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (fields: Omit<ModelRequest, "messages">, history: GrowOnly.GrowOnly<Message>): ModelRequest => {
  let messages: ReadonlyArray<Message> | undefined
  return Object.freeze({
    ...fields,
    get messages() {
      return messages ??= Object.freeze(GrowOnly.toArray(history))
    }
  })
}
