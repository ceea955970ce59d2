import type { WindowMessage } from '../format/records.js'
import { expandedOutput, leadingBlobId } from './store.js'

/** Expanded copies kept: the protected rounds of a window (a few dozen results) with room to spare. */
const KEEP = 256

/**
 * The request's view of fresh tool results stored as blobs (docs/contract.md §5): `[blob:<id>] ` +
 * the whole output (head + tail over `maxInlineBytes`), made once per message and kept
 * for the next requests (the same object, the same bytes every turn, until prune passes
 * it). Only the newest copies are kept: memory stays bounded whatever the task's length.
 */
export function freshOutputs(taskDir: string | (() => string), maxInlineBytes: number): (message: WindowMessage) => WindowMessage {
  const dir = typeof taskDir === 'string' ? () => taskDir : taskDir
  const copies = new Map<WindowMessage, WindowMessage>()
  return (message) => {
    if (message.role !== 'tool' || leadingBlobId(message.content) === null) return message
    const known = copies.get(message)
    if (known !== undefined) return known
    const content = expandedOutput(dir(), message.content, maxInlineBytes)
    const copy = content === message.content ? message : { ...message, content }
    copies.set(message, copy)
    if (copies.size > KEEP) copies.delete(copies.keys().next().value as WindowMessage)
    return copy
  }
}
