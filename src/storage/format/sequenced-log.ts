import { lastRecordSync, JsonlAppender } from './jsonl.js'
import type { JsonRecord } from './jsonl.js'

export interface LogOptions {
  /** fsync after every record (config context.durability: fsync). */
  fsync?: boolean
}

/**
 * An append-only JSON Lines log whose records carry a 1-based, strictly increasing
 * id. The next id continues from the file's last complete line, read from the end.
 */
export class SequencedLog<K extends string> {
  private last: number

  private constructor(
    private readonly appender: JsonlAppender,
    private readonly idField: K,
    lastId: number,
  ) {
    this.last = lastId
  }

  /** `idAliases` are other spellings of the id field that older files use (docs/contract.md §2). */
  static open<K extends string>(path: string, idField: K, idAliases: readonly string[] = [], options: LogOptions = {}): SequencedLog<K> {
    const appender = JsonlAppender.open(path, { fsync: options.fsync === true })
    const lastLine = lastRecordSync(path)
    return new SequencedLog(appender, idField, lastLine ? idOf(lastLine, [idField, ...idAliases]) : 0)
  }

  get lastId(): number {
    return this.last
  }

  get repairedBytes(): number {
    return this.appender.repairedBytes
  }

  /** Appends `fields` under the next id, written first; returns the record as stored. */
  append<T extends object>(fields: T): Record<K, number> & T {
    const record = { [this.idField]: this.last + 1, ...fields } as Record<K, number> & T
    this.appender.append(record)
    this.last++
    return record
  }

  /**
   * Appends `fields` under the last id again, without taking a new one: a record that
   * belongs beside the sequence rather than in it (tools.jsonl's network records).
   */
  appendBeside<T extends object>(fields: T): Record<K, number> & T {
    const record = { [this.idField]: this.last, ...fields } as Record<K, number> & T
    this.appender.append(record)
    return record
  }

  /** The id the next record gets. */
  get nextId(): number {
    return this.last + 1
  }

  /**
   * Appends a record the caller built under `nextId`, serialized as `head + middle +
   * tail` (see JsonlAppender.appendSpliced).
   */
  appendSpliced(head: string, middle: string | Buffer, tail: string): void {
    this.appender.appendSpliced(head, middle, tail)
    this.last++
  }

  close(): void {
    this.appender.close()
  }
}

function idOf(record: JsonRecord, fields: readonly string[]): number {
  for (const field of fields) {
    const value = record[field]
    if (typeof value === 'number' && Number.isInteger(value)) return value
  }
  return 0
}
