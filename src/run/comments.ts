import type { Comment } from '../sources/types.js'

/**
 * New comments as one user message, in seed 002's exact formats:
 * `[New Comment from @author]:\n<body>` for one; for several, `[New Comments Detected]:`
 * then `Comment N from @author (timestamp):`, the body and a blank line for each.
 */
export function formatComments(comments: readonly Comment[]): string {
  if (comments.length === 1) {
    const only = comments[0] as Comment
    return `[New Comment from @${only.author}]:\n${only.body}`
  }
  const lines = ['[New Comments Detected]:']
  comments.forEach((c, i) => lines.push(`Comment ${i + 1} from @${c.author} (${c.created_at}):`, c.body, ''))
  return lines.join('\n')
}
