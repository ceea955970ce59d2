/** A tool call that cannot be carried out: its message is the error result the model sees. */
export class ToolError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ToolError'
  }
}
