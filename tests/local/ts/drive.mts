// Drives a running Tickwork with a client generated from docs/openapi.json by openapi-typescript (types)
// and openapi-fetch (calls), compiled by tsc --strict: tests/local/test_generated_client.py runs it.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type JobCreate = components["schemas"]["JobCreate"];
type Target = components["schemas"]["TargetIn"];

const [baseUrl, token, targetUrl] = process.argv.slice(2);
const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });

const targets: Target[] = [
  { kind: "http", config: { url: `${targetUrl}/generated-ts`, method: "POST" } },
  { kind: "sqs", config: { queue_url: "https://sqs.us-east-1.amazonaws.com/123456789012/jobs", message: "m" } },
  { kind: "sns", config: { topic_arn: "arn:aws:sns:us-east-1:123456789012:alerts", message: "m" } },
  { kind: "eventbridge", config: { source: "a", detail_type: "b" } },
  { kind: "lambda", config: { function_name: "f", invocation_type: "Event" } },
  { kind: "stepfunctions", config: { state_machine_arn: "arn:aws:states:eu-west-1:123456789012:stateMachine:etl" } },
  { kind: "ecs", config: { cluster: "c", task_definition: "t", container: "main", subnets: ["subnet-0123abcd"] } },
];
// The types refuse what the API refuses: an http target without its url does not compile.
// @ts-expect-error config.url is required for an http target
const withoutUrl: Target = { kind: "http", config: { method: "POST" } };
void withoutUrl;

function check<T>(answer: { data?: T; error?: unknown; response: Response }, what: string): T {
  if (answer.data === undefined) {
    throw new Error(`${what}: ${answer.response.status} ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

async function main(): Promise<void> {
  const made: Record<string, string> = {};
  for (const target of targets) {
    const body: JobCreate = {
      name: `generated-ts ${target.kind}`,
      schedule: { expression: "0 4 * * *" },
      target,
    };
    const job = check(await client.POST("/jobs", { body }), `create ${target.kind}`);
    made[target.kind] = job.id;
  }
  const http = made["http"];
  const path = { job_id: http };
  const listed = check(await client.GET("/jobs", { params: { query: { limit: 100 } } }), "list");
  const preview = check(await client.GET("/jobs/{job_id}/preview", { params: { path, query: { count: 3 } } }), "preview");
  const paused = check(
    await client.POST("/jobs/{job_id}/pause", { params: { path, query: { note: "generated client" } } }),
    "pause",
  );
  const resumed = check(await client.POST("/jobs/{job_id}/resume", { params: { path } }), "resume");
  const run = check(await client.POST("/jobs/{job_id}/runs", { params: { path } }), "run now");
  let state = run.state;
  for (let tries = 0; tries < 60 && state !== "succeeded"; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const page = check(await client.GET("/jobs/{job_id}/runs", { params: { path } }), "runs");
    state = page.items.find((item) => item.id === run.id)?.state ?? state;
  }
  const deleted: number[] = [];
  for (const job_id of Object.values(made)) {
    const answer = await client.DELETE("/jobs/{job_id}", { params: { path: { job_id }, query: { note: "done" } } });
    deleted.push(answer.response.status);
  }
  console.log(
    JSON.stringify({
      made,
      listed: listed.items.map((item) => item.id),
      fires: preview.fires.length,
      paused: paused.state,
      resumed: resumed.state,
      run: { id: run.id, state },
      deleted,
    }),
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
