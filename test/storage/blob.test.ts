import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { describe, expect, it, onTestFinished } from 'vitest'
import { freshOutputs } from '../../src/storage/blob/expand.js'
import { taskDiskUse } from '../../src/storage/fs/disk.js'
import { BLOB_DIR, blobFiles, expandedOutput, leadingBlobId, readBlob, recordToolOutput } from '../../src/storage/blob/store.js'

const SETTINGS = { thresholdBytes: 1024, maxInlineBytes: 8 * 1024 }

function taskDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-blob-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const lines = (n: number, tag = 'line') => Array.from({ length: n }, (_, i) => `${tag} ${i + 1} ${'x'.repeat(40)}`).join('\n')

describe('blob store', () => {
  it('keeps a short output as it is and stores a long one once, referred to by id, size and head', () => {
    const dir = taskDir()
    expect(recordToolOutput(dir, 'short', SETTINGS)).toBe('short')
    expect(readdirSync(dir)).toEqual([])
    const text = lines(200)
    const refs = [1, 2, 3].map(() => recordToolOutput(dir, text, SETTINGS))
    expect(new Set(refs).size).toBe(1)
    const ref = refs[0] as string
    const id = leadingBlobId(ref) as string
    expect(id).toMatch(/^[0-9a-f]{64}$/)
    expect(readdirSync(join(dir, BLOB_DIR))).toEqual([id])
    expect(statSync(join(dir, BLOB_DIR, id)).mode & 0o777).toBe(0o600)
    expect(ref).toContain(`${Buffer.byteLength(text).toLocaleString('en-US')} bytes`)
    expect(ref).toContain('line 1 ')
    expect(ref.length).toBeLessThan(600)
    expect(readBlob(dir, id)).toBe(text)
  })

  it('masks before it hashes and writes: the blob holds no secret', () => {
    const dir = taskDir()
    const ref = recordToolOutput(dir, `${lines(100)}\naws AKIAIOSFODNN7EXAMPLE here\n${lines(100)}`, SETTINGS)
    const id = leadingBlobId(ref) as string
    const stored = readFileSync(join(dir, BLOB_DIR, id), 'utf8')
    expect(stored).not.toContain('AKIAIOSFODNN7EXAMPLE')
    expect(stored).toContain('aws ')
  })

  it('reads a blob gzipped by cleanup, and refuses ids that are not 64 hex digits', () => {
    const dir = taskDir()
    const text = lines(100)
    const id = leadingBlobId(recordToolOutput(dir, text, SETTINGS)) as string
    const path = join(dir, BLOB_DIR, id)
    writeFileSync(`${path}.gz`, gzipSync(readFileSync(path)))
    rmSync(path)
    expect(readBlob(dir, id)).toBe(text)
    expect(blobFiles(dir)).toEqual([`${BLOB_DIR}/${id}.gz`])
    // Written again: the gzipped one is the same content, nothing new is written.
    recordToolOutput(dir, text, SETTINGS)
    expect(readdirSync(join(dir, BLOB_DIR))).toEqual([`${id}.gz`])
    expect(readBlob(dir, 'f'.repeat(64))).toBeNull()
    for (const bad of ['../../etc/passwd', `${id}/..`, id.toUpperCase(), `${id}.gz`, '']) expect(() => readBlob(dir, bad)).toThrow(/not a blob id/)
  })

  it('a fresh output is sent whole after its reference, the same object and bytes each time; over the cap as head + tail', () => {
    const dir = taskDir()
    const text = lines(100)
    const ref = recordToolOutput(dir, text, SETTINGS)
    const id = leadingBlobId(ref) as string
    const fresh = freshOutputs(dir, SETTINGS.maxInlineBytes)
    const message = { role: 'tool' as const, content: ref, tool_call_id: 'c1' }
    const sent = fresh(message)
    expect(sent.content).toBe(`[blob:${id}] ${text}`)
    expect(fresh(message)).toBe(sent)
    expect(freshOutputs(dir, SETTINGS.maxInlineBytes)(message).content).toBe(sent.content)
    const user = { role: 'user' as const, content: ref }
    expect(fresh(user)).toBe(user)
    const big = lines(1000, 'big')
    const bigRef = recordToolOutput(dir, big, SETTINGS)
    const out = expandedOutput(dir, bigRef, SETTINGS.maxInlineBytes)
    expect(Buffer.byteLength(out)).toBeLessThan(SETTINGS.maxInlineBytes + 300)
    expect(out).toMatch(/^\[blob:[0-9a-f]{64}\] big 1 /)
    expect(out).toContain('big 1000 ')
    expect(out).toMatch(/bytes not sent; inspect blob [0-9a-f]{64}/)
  })

  it("a task's disk use counts its blobs, plain and gzipped", () => {
    const dir = taskDir()
    writeFileSync(join(dir, 'messages.jsonl'), 'x'.repeat(100))
    const id = leadingBlobId(recordToolOutput(dir, lines(100), SETTINGS)) as string
    const size = statSync(join(dir, BLOB_DIR, id)).size
    expect(taskDiskUse(dir)).toEqual({ bytes: 100 + size, raw: 100 + size })
    const gz = gzipSync(readFileSync(join(dir, BLOB_DIR, id)))
    writeFileSync(join(dir, BLOB_DIR, `${id}.gz`), gz)
    rmSync(join(dir, BLOB_DIR, id))
    expect(taskDiskUse(dir)).toEqual({ bytes: 100 + gz.length, raw: 100 + size })
  })
})
