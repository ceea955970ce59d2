/**
 * A buffer reused from one record to the next, so that appending allocates nothing
 * per record. A request above `keepBytes` gets a one-off buffer instead, so that one
 * huge record does not pin its size in memory for the life of the task.
 */
export class Scratch {
  private buffer: Buffer = Buffer.alloc(0)

  constructor(private readonly keepBytes = 1024 * 1024) {}

  /** A buffer of at least `size` bytes; its contents are garbage. */
  get(size: number): Buffer {
    if (this.buffer.length >= size) return this.buffer
    const buffer = Buffer.allocUnsafe(Math.max(size, Math.min(2 * this.buffer.length, this.keepBytes)))
    if (size <= this.keepBytes) this.buffer = buffer
    return buffer
  }
}
