import { defineTool, param } from './schema.js'

/** What a finish call answers; a resume finds the task's answer by it (src/run/repair.ts). */
export function finishedOutput(status: string): string {
  return `task finished (${status})`
}

export function isFinishedOutput(text: unknown): boolean {
  return typeof text === 'string' && /^task finished \((done|blocked)\)$/.test(text)
}

export const finish = defineTool({
  name: 'finish',
  description: 'End the task: a short summary of what you did (or why it cannot be done), and status "done" or "blocked".',
  parameters: {
    summary: param.text('what was changed and why, or what blocks the task'),
    // Defaulted: a weak model that forgets it most likely means "done".
    status: param.oneOf(['done', 'blocked'], '"done" when the task is complete, "blocked" when it cannot be completed', 'done'),
  },
  async run({ summary, status }) {
    return { output: finishedOutput(status), status: 'success', error: null, finish: { summary, status } }
  },
})
