/**
 * Untrusted text (an issue body, a comment, a message from someone else) as a quotation
 * that cannot end early: every line of it starts with `> `, so no line inside can pass
 * for a header of ours (`### @owner (…)`, `[New Comment from @owner]:`), whatever it
 * holds. Every line break a model may read as one (CR, U+2028, U+2029, U+0085, VT, FF)
 * starts a quoted line too.
 */
export function quoted(text: string): string {
  return text
    .split(/\r\n|[\r\n\u000b\u000c\u0085\u2028\u2029]/)
    .map((line) => (line === '' ? '>' : `> ${line}`))
    .join('\n')
}

/** A name or title from outside (login, label, title, sender): one line, control characters as spaces, cut to `max`. */
export function oneLine(text: string, max = 200): string {
  const flat = text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ').trim()
  return flat.length > max ? `${flat.slice(0, max)}…` : flat
}
