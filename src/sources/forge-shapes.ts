import { z } from 'zod'

// The fields a task's source reads of each forge reply, as the forges document them
// (docs.github.com/rest/issues, /rest/pulls, /graphql; docs.gitlab.com/api/issues,
// /merge_requests, /notes, /discussions): checked by forgeReply, so that a reply without
// them is one line naming the field, never a TypeError where it is read.

/** A GitHub user as replies give one: may be null (a deleted account). */
export const LOGIN = z.object({ login: z.string() }).nullish()
const LABEL = z.union([z.string(), z.object({ name: z.string() })])

export const GITHUB_ISSUE = z.object({
  title: z.string(),
  state: z.string(),
  body: z.string().nullish(),
  user: LOGIN,
  labels: z.array(LABEL),
  pull_request: z.object({}).nullish(),
})
export const GITHUB_LISTED = z.array(z.object({ number: z.number(), labels: z.array(LABEL) }))
export const GITHUB_COMMENTS = z.array(
  z.object({ id: z.number(), body: z.string().nullish(), user: LOGIN, created_at: z.string(), author_association: z.string() }),
)
export const GITHUB_PULL = z.object({
  html_url: z.string(),
  body: z.string().nullish(),
  user: LOGIN,
  head: z.object({ ref: z.string() }),
  base: z.object({ ref: z.string() }),
})
export const GITHUB_THREADS = z.object({
  repository: z.object({
    pullRequest: z.object({
      reviewThreads: z.object({
        nodes: z.array(
          z.object({
            isResolved: z.boolean(),
            path: z.string(),
            line: z.number().nullish(),
            comments: z.object({ nodes: z.array(z.object({ author: LOGIN, body: z.string() })) }),
          }),
        ),
      }),
    }),
  }),
})
export const MADE = z.object({ id: z.number() })

const USERNAME = z.object({ username: z.string() })
export const GITLAB_ITEM = z.object({
  title: z.string(),
  description: z.string().nullish(),
  author: USERNAME,
  labels: z.array(z.string()),
  source_branch: z.string().optional(),
  target_branch: z.string().optional(),
  web_url: z.string().optional(),
})
export const GITLAB_TRACKED = z.object({ iid: z.number(), labels: z.array(z.string()), state: z.string() })
const GITLAB_NOTE = z.object({ id: z.number(), body: z.string(), author: USERNAME, created_at: z.string(), system: z.boolean() })
export type GitlabNote = z.infer<typeof GITLAB_NOTE>
export const GITLAB_NOTES = z.array(GITLAB_NOTE)
export const GITLAB_DISCUSSIONS = z.array(
  z.object({
    notes: z.array(
      z.object({
        body: z.string(),
        author: USERNAME,
        system: z.boolean(),
        resolvable: z.boolean().optional(),
        resolved: z.boolean().nullish(),
        position: z.object({ new_path: z.string().nullish(), new_line: z.number().nullish() }).nullish(),
      }),
    ),
  }),
)
