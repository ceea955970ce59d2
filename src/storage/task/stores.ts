import { join } from 'node:path'
import { FILES } from '../fs/layout.js'
import { maskText, maskValue } from '../format/mask.js'
import type { NetworkRecord, PlanningRecord, SummaryRecord, ToolRecord } from '../format/records.js'
import { SequencedLog } from '../format/sequenced-log.js'
import { jsonString } from '../format/json-string.js'
import type { LogOptions } from '../format/sequenced-log.js'

type Clock = () => Date

interface StoreOptions extends LogOptions {
  now?: Clock
}

const nowIso = (options: StoreOptions): string => (options.now?.() ?? new Date()).toISOString()

/** summaries.jsonl: every compression, append-only (docs/contract.md §2.5). */
export class SummaryStore {
  private constructor(private readonly log: SequencedLog<'summary_id'>) {}

  static open(dir: string, options: StoreOptions = {}): SummaryStore {
    return new SummaryStore(SequencedLog.open(join(dir, FILES.summaries), 'summary_id', ['id'], options))
  }

  get lastId(): number {
    return this.log.lastId
  }

  add(fields: Omit<SummaryRecord, 'summary_id'>): SummaryRecord {
    return this.log.append({ ...fields, summary: maskText(fields.summary) })
  }

  close(): void {
    this.log.close()
  }
}

/** tools.jsonl: every tool execution (docs/contract.md §2.6). */
export class ToolStore {
  private constructor(
    private readonly log: SequencedLog<'seq'>,
    private readonly options: StoreOptions,
  ) {}

  static open(dir: string, options: StoreOptions = {}): ToolStore {
    return new ToolStore(SequencedLog.open(join(dir, FILES.tools), 'seq', [], options), options)
  }

  get lastSeq(): number {
    return this.log.lastId
  }

  add(fields: Omit<ToolRecord, 'seq' | 'timestamp'>): ToolRecord {
    const record = {
      tool_name: fields.tool_name,
      arguments: maskValue(fields.arguments),
      result: maskValue(fields.result),
      status: fields.status,
      error: fields.error === null ? null : maskText(fields.error),
      duration_ms: fields.duration_ms,
      timestamp: nowIso(this.options),
    }
    const { result } = record
    // A text result (the common case, and most of the bytes) is the tool message's content,
    // JSON-escaped already: spliced in, the line is what JSON.stringify of the record gives.
    if (typeof result !== 'string' || Object.values(record).includes(undefined)) return this.log.append(record)
    const seq = this.log.nextId
    const head = `{"seq":${seq},"tool_name":${JSON.stringify(record.tool_name)},"arguments":${JSON.stringify(record.arguments)},"result":`
    const tail = `,"status":${JSON.stringify(record.status)},"error":${JSON.stringify(record.error)},"duration_ms":${JSON.stringify(record.duration_ms)},"timestamp":${JSON.stringify(record.timestamp)}}\n`
    this.log.appendSpliced(head, jsonString(result), tail)
    return { seq, ...record }
  }

  /** A connection through the egress proxy, masked (a host or a reason may carry a secret), beside the calls. */
  addNetwork(fields: Omit<NetworkRecord, 'seq' | 'timestamp' | 'kind' | 'tool_name'>): NetworkRecord {
    return this.log.appendBeside({
      kind: 'network' as const,
      tool_name: 'network' as const,
      arguments: maskValue(fields.arguments),
      result: maskValue(fields.result),
      status: fields.status,
      error: fields.error === null ? null : maskText(fields.error),
      duration_ms: fields.duration_ms,
      timestamp: nowIso(this.options),
    })
  }

  close(): void {
    this.log.close()
  }
}

/** planning.jsonl: plan history (docs/contract.md §2.7). */
export class PlanningStore {
  private constructor(
    private readonly log: SequencedLog<'id'>,
    private readonly options: StoreOptions,
  ) {}

  static open(dir: string, options: StoreOptions = {}): PlanningStore {
    return new PlanningStore(SequencedLog.open(join(dir, FILES.planning), 'id', [], options), options)
  }

  add(planType: string, planContent: string): PlanningRecord {
    return this.log.append({
      plan_type: planType,
      plan_content: maskText(planContent),
      created_at: nowIso(this.options),
    })
  }

  close(): void {
    this.log.close()
  }
}
