import { mkdirSync, renameSync } from 'node:fs'
import type { Layout } from '../../../src/storage/fs/layout.js'
import { describe, expect, it } from 'vitest'
import { NotFoundError, UsageError } from '../../../src/errors.js'
import { locateTask, parseTaskId, resolveTask } from '../../../src/storage/fs/layout.js'
import { makeTree, uuidN } from '../../fixtures/tree.js'

describe('parseTaskId', () => {
  it('accepts a full uuid and prefixes of 8+ hex characters, lower-cased', () => {
    expect(parseTaskId('550E8400-E29B-41D4-A716-446655440000')).toEqual({ id: '550e8400-e29b-41d4-a716-446655440000', full: true })
    expect(parseTaskId('550e8400')).toEqual({ id: '550e8400', full: false })
    expect(parseTaskId('550e8400-e2')).toEqual({ id: '550e8400-e2', full: false })
  })

  it.each(['', '../x', '/etc/passwd', '*', '550e840', '550e8400*', '550e8400e29b', 'zzzzzzzz', '550e8400-e29b-41d4-a716-446655440000-0'])(
    'rejects %j as a usage error',
    (id) => {
      expect(() => parseTaskId(id)).toThrow(UsageError)
    },
  )
})

describe('resolveTask', () => {
  it('finds a task in any location by full id or prefix', () => {
    const tree = makeTree()
    mkdirSync(tree.layout.taskDir('paused', uuidN(1)))
    mkdirSync(tree.layout.taskDir('completed', uuidN(0x2000)))
    expect(resolveTask(tree.layout, uuidN(1))).toMatchObject({ location: 'paused', uuid: uuidN(1) })
    expect(resolveTask(tree.layout, '00002000')).toMatchObject({ location: 'completed', uuid: uuidN(0x2000) })
  })

  it('refuses an ambiguous prefix and reports a missing task as not found', () => {
    const tree = makeTree()
    mkdirSync(tree.layout.taskDir('running', '12345678-0000-4000-8000-000000000001'))
    mkdirSync(tree.layout.taskDir('completed', '12345678-0000-4000-8000-000000000002'))
    expect(() => resolveTask(tree.layout, '12345678')).toThrow(UsageError)
    expect(() => resolveTask(tree.layout, 'abcdef01')).toThrow(NotFoundError)
  })
})

describe('locateTask', () => {
  it('finds a task where it is, and null where it is nowhere', () => {
    const tree = makeTree()
    mkdirSync(tree.layout.taskDir('completed', uuidN(3)))
    expect(locateTask(tree.layout, uuidN(3))).toEqual({ uuid: uuidN(3), location: 'completed', dir: tree.layout.taskDir('completed', uuidN(3)) })
    expect(locateTask(tree.layout, uuidN(4))).toBeNull()
  })

  it('finds a task moved from paused/ to running/ between its looks at running/ and paused/', () => {
    const tree = makeTree()
    mkdirSync(tree.layout.taskDir('paused', uuidN(5)))
    // A layout whose look at paused/ comes just after a resume moved the task to running/.
    let moved = false
    const racing: Layout = Object.create(tree.layout) as Layout
    racing.taskDir = (location, uuid) => {
      if (location === 'paused' && !moved) {
        moved = true
        renameSync(tree.layout.taskDir('paused', uuid), tree.layout.taskDir('running', uuid))
      }
      return tree.layout.taskDir(location, uuid)
    }
    expect(locateTask(racing, uuidN(5))).toMatchObject({ location: 'running' })
  })
})
