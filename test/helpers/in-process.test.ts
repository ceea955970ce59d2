import { describe, expect, it } from 'vitest'
import { inProcess } from './in-process.js'

// Which command lines cliIn runs in the test's own process (docs/development.md#tests): a
// command that locks, waits, reads standard input or owns its process stays a real one.
describe('inProcess', () => {
  it('runs the commands that read the tree, queue or read a job, and end', () => {
    for (const args of [
      ['list', '--json'],
      ['--home', '/t', 'stats'],
      ['view', 'abc12345'],
      ['enqueue', '--task', 'x', '--workspace', '/w'],
      ['jobs', '--state', 'failed'],
      ['jobs', 'show', '3'],
      ['--version'],
    ])
      expect(inProcess(args), args.join(' ')).toBe(true)
  })

  it('leaves as processes what locks, waits, reads standard input or owns its process', () => {
    for (const args of [
      ['jobs', 'cancel', '3'],
      ['jobs', 'retry', '3'],
      ['enqueue', '--task-file', '-', '--workspace', '/w'],
      ['enqueue', '--task-file=-', '--workspace', '/w'],
      ['view', 'abc12345', '--follow'],
      ['stats', '--watch'],
      ['cleanup'],
      ['run', '--task', 'x'],
      ['worker'],
    ])
      expect(inProcess(args), args.join(' ')).toBe(false)
  })
})
