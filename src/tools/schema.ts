// zod/mini (as in config.ts): the bundle keeps only the functions used.
import * as z from 'zod/mini'
import type { Tool, ToolContext, ToolOutcome } from './types.js'

type Shape = Record<string, z.core.$ZodType>
type JsonSchema = Record<string, unknown>

export interface ToolDefinition<S extends Shape> {
  name: string
  description: string
  /** The arguments, defined once: the JSON Schema offered to the model and the validator both come from it. */
  parameters: S
  run(args: z.output<z.ZodMiniObject<S>>, ctx: ToolContext): Promise<ToolOutcome>
}

/**
 * The built-in tools' JSON Schemas by tool name, put into the bundle by scripts/bundle.mjs,
 * which computes them with jsonSchema() from these same definitions when it builds: z.toJSONSchema
 * of the tools was ~1.6 % of run's start-up in a CPU profile (BENCHMARKS.md, start-run). Undefined when
 * running from dist/ (the tests), where they are computed here.
 */
declare const CTXAGENT_TOOL_SCHEMAS: string | undefined
const BUILT: Readonly<Record<string, JsonSchema>> = typeof CTXAGENT_TOOL_SCHEMAS === 'string' ? JSON.parse(CTXAGENT_TOOL_SCHEMAS) : {}

/** A Tool from its definition: the OpenAI spec and a lenient validator from one zod shape. */
export function defineTool<S extends Shape>(def: ToolDefinition<S>): Tool {
  // z.object drops unknown keys instead of refusing them: a stray extra argument is harmless.
  const schema = z.object(def.parameters)
  const parameters = builtSchema(def) ?? jsonSchema(schema)
  const properties = (parameters.properties ?? {}) as Record<string, JsonSchema>
  const expected = `the arguments of ${def.name} are ${JSON.stringify(parameters)}`
  return {
    name: def.name,
    spec: { type: 'function', function: { name: def.name, description: def.description, parameters } },
    validate(args) {
      if (args === null || typeof args !== 'object' || Array.isArray(args)) {
        return { ok: false, error: `the arguments must be a JSON object, not ${Array.isArray(args) ? 'an array' : typeof args}; ${expected}` }
      }
      const input = coerce(args as Record<string, unknown>, properties)
      const parsed = z.safeParse(schema, input)
      if (parsed.success) return { ok: true, args: parsed.data as Record<string, unknown> }
      return { ok: false, error: `${describeIssue(parsed.error.issues[0], input, properties)}; ${expected}` }
    },
    run: (args, ctx) => def.run(args as z.output<z.ZodMiniObject<S>>, ctx),
  }
}

/** The schema the build computed for this tool, when its arguments are the ones it was computed for. */
function builtSchema(def: ToolDefinition<Shape>): JsonSchema | null {
  const built = Object.hasOwn(BUILT, def.name) ? BUILT[def.name] : undefined
  if (built === undefined) return null
  const keys = Object.keys((built.properties ?? {}) as JsonSchema)
  const wanted = Object.keys(def.parameters)
  return keys.length === wanted.length && wanted.every((k) => keys.includes(k)) ? built : null
}

/** The JSON Schema of the input (defaults make a field optional), without noise a model does not need. */
function jsonSchema(schema: z.core.$ZodType): JsonSchema {
  const out = z.toJSONSchema(schema, { io: 'input' }) as JsonSchema
  delete out.$schema
  for (const property of Object.values((out.properties ?? {}) as Record<string, JsonSchema>)) {
    // z.int() adds the safe-integer bounds; they only lengthen the prompt.
    if (property.maximum === Number.MAX_SAFE_INTEGER) delete property.maximum
    if (property.minimum === Number.MIN_SAFE_INTEGER) delete property.minimum
  }
  return out
}

/**
 * Lenient the way weak local models need: "5" → 5 and "true" → true where the schema
 * wants a number or a boolean, and null for a field treated as absent (so its default
 * applies). Anything else is left for the schema to judge.
 */
function coerce(args: Record<string, unknown>, properties: Record<string, JsonSchema>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(args)) {
    if (value === null) continue
    const type = properties[key]?.type
    if (typeof value === 'string' && (type === 'integer' || type === 'number') && /^\s*-?\d+(\.\d+)?\s*$/.test(value)) out[key] = Number(value)
    else if (typeof value === 'string' && type === 'boolean' && /^\s*(true|false)\s*$/i.test(value)) out[key] = value.trim().toLowerCase() === 'true'
    else out[key] = value
  }
  return out
}

function describeIssue(issue: z.core.$ZodIssue | undefined, input: Record<string, unknown>, properties: Record<string, JsonSchema>): string {
  if (!issue) return 'invalid arguments'
  const field = issue.path.map(String).join('.')
  const name = `argument '${field || '(all)'}'`
  const value = issue.path.length === 1 ? input[String(issue.path[0])] : undefined
  switch (issue.code) {
    case 'invalid_type': {
      // The JSON Schema's type ("integer") says more than zod's ("number").
      const type = String(properties[field]?.type ?? issue.expected)
      if (issue.path.length === 1 && value === undefined) return `missing argument '${field}' (${type})`
      return `${name} must be ${article(type)}, not ${kind(value)}`
    }
    case 'too_small':
      return `${name} must be at least ${String(issue.minimum)}`
    case 'too_big':
      return `${name} must be at most ${String(issue.maximum)}`
    case 'invalid_value':
      return `${name} must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}, not ${JSON.stringify(value)}`
    default:
      return `${name} is invalid (${issue.message})`
  }
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`
}

function kind(value: unknown): string {
  if (Array.isArray(value)) return 'an array'
  if (typeof value === 'number' && !Number.isInteger(value)) return `a fractional number (${value})`
  if (typeof value === 'string') return `a string (${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)})`
  return article(typeof value)
}

/** Parameter builders, so each tool's shape reads as a table. */
export const param = {
  text: (description: string) => z.string().check(z.describe(description)),
  textWithDefault: (description: string, defaultValue: string) => z._default(z.string(), defaultValue).check(z.describe(description)),
  optionalText: (description: string) => z.optional(z.string().check(z.describe(description))),
  int: (description: string, defaultValue: number, min = 1, max?: number) =>
    z._default(max === undefined ? z.int().check(z.gte(min)) : z.int().check(z.gte(min), z.lte(max)), defaultValue).check(z.describe(description)),
  optionalInt: (description: string, min = 1) => z.optional(z.int().check(z.gte(min), z.describe(description))),
  flag: (description: string, defaultValue: boolean) => z._default(z.boolean(), defaultValue).check(z.describe(description)),
  oneOf: <const T extends readonly [string, ...string[]]>(values: T, description: string, defaultValue: T[number]) =>
    z._default(z.enum(values), defaultValue as never).check(z.describe(description)),
}

/** A successful outcome. */
export const ok = (output: string): ToolOutcome => ({ output, status: 'success', error: null })
