import { Ajv } from 'ajv'
import type { ErrorObject } from 'ajv'
import type { Tool, ToolContext, ToolOutcome } from './types.js'

/** JSON Schema of a tool's arguments: an object of named properties. */
export interface ObjectSchema {
  type: 'object'
  properties: Record<string, Record<string, unknown>>
  required?: string[]
  additionalProperties?: boolean
}

// Lenient the way weak local models need: "5" → 5, "true" → true, defaults filled in,
// unknown properties dropped rather than refused.
const ajv = new Ajv({ coerceTypes: true, useDefaults: true, removeAdditional: 'all', allErrors: false, strict: false })

export interface ToolDefinition<A> {
  name: string
  description: string
  parameters: ObjectSchema
  run(args: A, ctx: ToolContext): Promise<ToolOutcome>
}

/** A Tool from its definition: the OpenAI spec and a validator from one JSON Schema. */
export function defineTool<A>(def: ToolDefinition<A>): Tool {
  const parameters = { additionalProperties: false, ...def.parameters }
  const check = ajv.compile(parameters)
  return {
    name: def.name,
    spec: { type: 'function', function: { name: def.name, description: def.description, parameters } },
    validate(args) {
      if (args === null || typeof args !== 'object' || Array.isArray(args)) {
        return { ok: false, error: `the arguments of ${def.name} must be a JSON object; expected ${JSON.stringify(parameters)}` }
      }
      const copy = structuredClone(args) as Record<string, unknown>
      if (check(copy)) return { ok: true, args: copy }
      return { ok: false, error: `${describe(check.errors?.[0])}; the arguments of ${def.name} are ${JSON.stringify(parameters)}` }
    },
    run: (args, ctx) => def.run(args as A, ctx),
  }
}

function describe(error: ErrorObject | undefined): string {
  if (!error) return 'invalid arguments'
  if (error.keyword === 'required') return `missing argument '${String(error.params.missingProperty)}'`
  const field = error.instancePath.replace(/^\//, '').replaceAll('/', '.')
  return `argument '${field || '(all)'}' ${error.message ?? 'is invalid'}`
}

/** A successful outcome. */
export const ok = (output: string): ToolOutcome => ({ output, status: 'success', error: null })

/** An error outcome: the model sees the message. */
export const failed = (message: string): ToolOutcome => ({ output: `Error: ${message}`, status: 'error', error: message })
