import { defineTool } from './schema.js'

interface Args {
  summary: string
  status: 'done' | 'blocked'
}

export const finish = defineTool<Args>({
  name: 'finish',
  description: 'End the task: a short summary of what you did (or why it cannot be done), and status "done" or "blocked".',
  parameters: {
    type: 'object',
    properties: {
      summary: { type: 'string', description: 'what was changed and why, or what blocks the task' },
      status: { type: 'string', enum: ['done', 'blocked'], default: 'done' },
    },
    required: ['summary'],
  },
  async run({ summary, status }) {
    return { output: `task finished (${status})`, status: 'success', error: null, finish: { summary, status } }
  },
})
