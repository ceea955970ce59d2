/**
 * JSON.stringify(text), remembered for the last few long texts. A tool's result is one
 * string that goes out four times, as JSON each time: into messages.jsonl and
 * current.jsonl, into tools.jsonl, and into the next request. Through here it is
 * serialised once for the last two, and for all four when it is longer than the message
 * store's own encoder takes (~2 µs a KB of code each time saved; the strings are compared
 * by identity first, so a hit is a pointer comparison).
 */
const MIN_LENGTH = 1024
const KEPT = 4

const recent: { text: string; json: string }[] = []

export function jsonString(text: string): string {
  if (text.length < MIN_LENGTH) return JSON.stringify(text)
  for (const seen of recent) if (seen.text === text) return seen.json
  const json = JSON.stringify(text)
  recent.unshift({ text, json })
  if (recent.length > KEPT) recent.pop()
  return json
}
