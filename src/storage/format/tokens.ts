/**
 * Token estimate of docs/contract.md §5: characters / 4, or characters / 2 when at least
 * half of the characters are Japanese (kana or kanji), which tokenise far denser.
 */
const JAPANESE = /[\u3040-\u30ff\u3400-\u9fff\uff66-\uff9f]/

export function estimateTokens(text: string): number {
  const length = text.length
  if (length === 0) return 0
  // Fast path: one native scan tells that most texts hold no Japanese at all.
  if (!JAPANESE.test(text)) return Math.ceil(length / 4)
  let japanese = 0
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i)
    // Hiragana, katakana, CJK ideographs (incl. extension A), half-width katakana.
    if ((c >= 0x3040 && c <= 0x30ff) || (c >= 0x3400 && c <= 0x9fff) || (c >= 0xff66 && c <= 0xff9f)) japanese++
  }
  return Math.ceil(japanese * 2 >= length ? length / 2 : length / 4)
}

/**
 * Each message's estimate, kept for as long as the message object lives: the window's
 * messages are built once and never changed in place (a change makes a copy), so a turn
 * estimates only the messages that are new to it, not the whole window again.
 */
const estimates = new WeakMap<object, number>()

/** Tokens of a message as the LLM sees it: its text plus the serialized tool calls. */
export function estimateMessageTokens(message: { content?: unknown; tool_calls?: unknown }): number {
  const known = estimates.get(message)
  if (known !== undefined) return known
  const content = typeof message.content === 'string' ? message.content : message.content == null ? '' : JSON.stringify(message.content)
  const calls = message.tool_calls == null ? '' : JSON.stringify(message.tool_calls)
  const tokens = estimateTokens(content) + estimateTokens(calls)
  estimates.set(message, tokens)
  return tokens
}

/** Records `tokens` as the estimate of `message`, computed from the same text by whoever made it (the store, as it appended it). */
export function rememberEstimate(message: object, tokens: number): void {
  estimates.set(message, tokens)
}

/** Estimated tokens of a whole window (what one request would carry). */
export function windowTokens(window: readonly { content?: unknown; tool_calls?: unknown }[]): number {
  return window.reduce((sum, m) => sum + estimateMessageTokens(m), 0)
}
