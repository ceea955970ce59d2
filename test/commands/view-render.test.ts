import { describe, expect, it } from 'vitest'
import { taskName } from '../../src/commands/view/render.js'

describe("view's Task line", () => {
  it('names a local task by its id, or says it has none; an issue by #, a merge request by !', () => {
    expect(taskName('local', 'task', 'calc-1', 'local_task')).toBe('local task calc-1')
    expect(taskName('local', 'task', '', 'local_task')).toBe('local task (no --task-id)')
    expect(taskName('github', 'issue', '42', 'github_issue')).toBe('issue #42')
    expect(taskName('github', 'pull_request', '7', 'github_pull_request')).toBe('pull request #7')
    expect(taskName('gitlab', 'merge_request', '7', 'gitlab_merge_request')).toBe('merge request !7')
    expect(taskName('other', '', '', 'seed_type')).toBe('seed_type')
  })
})
