import { oneLine, quoted } from '../sources/quote.js'
import type { Comment } from '../sources/types.js'

/**
 * New comments as one user message, in docs/contract.md §6's formats with each body quoted:
 * `[New Comment from @author]:\n> <body>` for one; for several, `[New Comments Detected]:`
 * then `Comment N from @author (timestamp):`, the quoted body and a blank line for each.
 * A body is someone else's words: every line of it is quoted (`> `), so a forged
 * `[New Comment from @owner]:` inside it stays visibly inside the quotation.
 */
export function formatComments(comments: readonly Comment[]): string {
  if (comments.length === 1) {
    const only = comments[0] as Comment
    return `[New Comment from @${oneLine(only.author)}${untrusted(only)}]:\n${quoted(only.body)}`
  }
  const lines = ['[New Comments Detected]:']
  comments.forEach((c, i) =>
    lines.push(`Comment ${i + 1} from @${oneLine(c.author)}${c.created_at ? ` (${oneLine(c.created_at)})` : ''}${untrusted(c)}:`, quoted(c.body), ''),
  )
  return lines.join('\n')
}

/** A comment by someone without write access to the repository says so (docs/delivery.md#trust). */
function untrusted(c: Comment): string {
  return c.trusted === false ? ', who has no write access to the repository' : ''
}
