// zod/mini (as the config's schema): the bundle keeps only the functions used. Imported by
// schema.ts at a tool's first call, not at start-up.
import * as z from 'zod/mini'
import type { Param, Shape, Validation } from './types.js'

type JsonSchema = Record<string, unknown>

/** The validator of a tool's arguments (already coerced): its values with defaults applied, or one line naming the first bad field and the schema (`expected`). */
export function validatorOf(shape: Shape, properties: Record<string, JsonSchema>, expected: string): (input: Record<string, unknown>) => Validation {
  const schema = zodObjectOf(shape)
  return (input) => {
    const parsed = z.safeParse(schema, input)
    if (parsed.success) return { ok: true, args: parsed.data as Record<string, unknown> }
    return { ok: false, error: `${describeIssue(parsed.error.issues[0], input, properties)}; ${expected}` }
  }
}

/** The zod object of a shape. z.object drops unknown keys instead of refusing them: a stray extra argument is harmless. */
export function zodObjectOf(shape: Shape): z.ZodMiniObject {
  return z.object(Object.fromEntries(Object.entries(shape).map(([key, p]) => [key, zodOf(p)])))
}

function zodOf(p: Param<unknown>): z.ZodMiniType {
  const bounds = [...(p.minimum !== undefined ? [z.gte(p.minimum)] : []), ...(p.maximum !== undefined ? [z.lte(p.maximum)] : [])]
  const base: z.ZodMiniType =
    p.kind === 'boolean'
      ? z.boolean()
      : p.kind === 'integer'
        ? z.int().check(...bounds)
        : p.values !== undefined
          ? z.enum(p.values as [string, ...string[]])
          : z.string()
  const described = (schema: z.ZodMiniType): z.ZodMiniType => schema.check(z.describe(p.description))
  if (p.optional) return z.optional(described(base))
  return described(p.default !== undefined ? z._default(base, p.default as never) : base)
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
