import { describe, expect, it } from 'vitest'
import { CtxError, UsageError } from '../src/errors.js'
import { explainSystemError, isDiskFull } from '../src/system-errors.js'

const errno = (code: string, extra: Record<string, unknown> = {}) => Object.assign(new Error(`${code}: raw text`), { code, ...extra })

describe('explainSystemError', () => {
  it('says a full disk in words, naming the tree (write() errors carry no path) or the file', () => {
    expect(explainSystemError(errno('ENOSPC'), '/srv/tree')?.message).toBe('no space left on the device holding /srv/tree')
    expect(explainSystemError(errno('ENOSPC', { path: '/srv/tree/x.tmp' }), '/srv/tree')?.message).toBe(
      'no space left on the device holding /srv/tree (writing /srv/tree/x.tmp)',
    )
    const sqlite = explainSystemError(errno('SQLITE_FULL'), '/srv/tree')
    expect(sqlite).toBeInstanceOf(CtxError)
    expect(sqlite?.exitCode).toBe(1)
    expect(sqlite?.hint).toMatch(/free some space/)
  })

  it('names the path and what to do for permissions, read-only disks, files where directories belong', () => {
    expect(explainSystemError(errno('EACCES', { path: '/srv/tree/running' }), '/srv/tree')?.message).toBe('permission denied: /srv/tree/running')
    expect(explainSystemError(errno('EROFS'), '/srv/tree')?.message).toBe('the task tree /srv/tree is on a read-only file system')
    expect(explainSystemError(errno('ENOTDIR', { path: '/srv/tree/running/x' }), '/srv/tree')?.hint).toMatch(/--home/)
    expect(explainSystemError(errno('SQLITE_CORRUPT'), '/srv/tree')?.hint).toMatch(/reindex/)
  })

  it('leaves our own errors and unknown ones alone', () => {
    expect(explainSystemError(new UsageError('bad'), '/srv')).toBeNull()
    expect(explainSystemError(new Error('plain'), '/srv')).toBeNull()
    expect(explainSystemError(errno('ECONNRESET'), '/srv')).toBeNull()
    expect(explainSystemError('a string', '/srv')).toBeNull()
  })

  it('counts SQLite I/O errors as a full disk only when the device really is (nearly) full', () => {
    expect(isDiskFull(errno('SQLITE_IOERR_SHMSIZE'), '/')).toBe(false) // this machine's root has room
    expect(isDiskFull(errno('ENOSPC'), '/')).toBe(true)
    expect(isDiskFull(errno('EDQUOT'), '/')).toBe(true)
  })
})
