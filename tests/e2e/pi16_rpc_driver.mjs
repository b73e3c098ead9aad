// Drive an RPC-mode agent with pi 1.6.0's own RpcClient and report each method (issue 17 §3).
//
// Usage: node pi16_rpc_driver.mjs CONFIG.json
//
// CONFIG (written by tests/e2e/pi16_conformance.py):
//   package:  the installed @earendil-works/pi-coding-agent directory (RpcClient is
//             imported from its dist/index.js, as a front-end would import it)
//   client:   RpcClient options: {cliPath, cwd, env, provider?, model?, args?}
//             (RpcClient spawns `node CLIPATH --mode rpc ...`: `node` from PATH)
//   setModel: [provider, modelId] for set_model
//   exportPath, workDir: where export_html writes and scratch files go
//   timeoutMs: per-method deadline (RpcClient's own per-command timeout is 30 s)
//
// Prints one JSON line per step on stdout:
//   {"method", "command", "ok", "error"?, "result"?, "events", "responses"}
// `ok`/`error`: whether the method resolved; `result` is what it resolved to (absent
// for undefined); `events` the record types the client saw while the step ran;
// `responses` the raw responses it got ({command, success, error?, hasData}).
// A last line {"method": "(done)", "ok": true} says the driver itself finished.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const { RpcClient } = await import(pathToFileURL(join(config.package, "dist", "index.js")).href);
const timeoutMs = config.timeoutMs ?? 60000;

function withDeadline(promise, label) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`driver deadline: ${label} took more than ${timeoutMs} ms`)), timeoutMs);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

const client = new RpcClient(config.client);
const seen = [];
// RpcClient's void methods (setThinkingLevel, abort, ...) resolve even when the
// response says success: false, so the raw responses are recorded too.
let responses = [];
const send = client.send.bind(client);
client.send = async (command) => {
  const response = await send(command);
  responses.push({
    command: response.command,
    success: response.success,
    ...(response.error === undefined ? {} : { error: String(response.error).slice(0, 300) }),
    hasData: Object.hasOwn(response, "data"),
  });
  return response;
};
// Whether a run is going, from the events: a step that failed (a prompt whose
// response could not be read, an idle steer that started a run) must not leave
// the next step racing a live run, so each step first waits for the run to end.
let running = false;
let ended = null;
client.onEvent((event) => {
  seen.push(event);
  if (event.type === "agent_start") running = true;
  if (event.type === "agent_settled" || event.type === "agent_end") {
    running = false;
    ended?.();
  }
});

async function quiet() {
  if (!running) return;
  await withDeadline(new Promise((resolve) => { ended = resolve; }), "the previous run to end").catch(() => {});
  ended = null;
  // agent_end may be followed by agent_settled (pi): let the stream drain a moment.
  await new Promise((resolve) => setTimeout(resolve, 200));
}

function report(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

// Run one step: `call` returns the method's promise; the line says whether it resolved.
async function step(method, command, call) {
  await quiet();
  const before = seen.length;
  responses = [];
  const line = { method, command };
  try {
    const result = await withDeadline(call(), method);
    line.ok = true;
    line.result = result;
  } catch (error) {
    line.ok = false;
    line.error = String(error?.message ?? error).split("\n")[0].slice(0, 300);
  }
  line.events = [...new Set(seen.slice(before).map((e) => e.type))];
  line.responses = responses;
  report(line);
  return line;
}

try {
  await client.start();
} catch (error) {
  report({ method: "start", command: null, ok: false, error: String(error?.message ?? error).slice(0, 500) });
  process.exit(0);
}
report({ method: "start", command: null, ok: true });

// Wait until the agent answers at all (start() only waits 100 ms, and each command
// times out after 30 s): on a busy machine start-up can take longer. Not reported.
for (let attempt = 0; attempt < 6; attempt++) {
  try {
    await client.getState();
    break;
  } catch (error) {
    if (!String(error?.message).startsWith("Timeout waiting for response")) break;
  }
}

const state = await step("getState", "get_state", () => client.getState());
await step("getCommands", "get_commands", () => client.getCommands());
await step("getAvailableModels", "get_available_models", () => client.getAvailableModels());
await step("getAvailableThinkingLevels", "get_available_thinking_levels", () => client.getAvailableThinkingLevels());
await step("setThinkingLevel", "set_thinking_level", () => client.setThinkingLevel("off"));
await step("cycleThinkingLevel", "cycle_thinking_level", () => client.cycleThinkingLevel());
await step("setSteeringMode", "set_steering_mode", () => client.setSteeringMode("one-at-a-time"));
await step("setFollowUpMode", "set_follow_up_mode", () => client.setFollowUpMode("one-at-a-time"));
await step("setAutoCompaction", "set_auto_compaction", () => client.setAutoCompaction(false));
await step("setAutoRetry", "set_auto_retry", () => client.setAutoRetry(false));
// The run a prompt started ends with agent_settled (pi) or at least agent_end.
function runEnd() {
  return new Promise((resolve) => {
    const off = client.onEvent((event) => {
      if (event.type === "agent_settled" || event.type === "agent_end") {
        off();
        resolve();
      }
    });
  });
}

// When a prompt was accepted but the method threw (no data.disposition), its run
// still goes on: wait for its end inside the step, so its events stay with it.
async function keepingRun(call) {
  const end = runEnd();
  try {
    return await call();
  } catch (error) {
    if (responses.some((r) => r.command === "prompt" && r.success)) {
      await withDeadline(end, "the accepted prompt's run to end").catch(() => {});
    }
    throw error;
  }
}

// prompt(): subscribe first (rpc.md "Run lifecycle"), then wait for agent_settled.
await step("prompt", "prompt", () =>
  keepingRun(async () => {
    const settled = client.waitForIdle(timeoutMs);
    settled.catch(() => {});
    const disposition = await client.prompt("go");
    if (disposition !== "handled") await settled;
    return disposition;
  }),
);
await step("promptAndWait", "prompt", () =>
  keepingRun(async () => {
    const events = await client.promptAndWait("again", undefined, timeoutMs);
    return events.map((e) => e.type);
  }),
);
await step("getMessages", "get_messages", () => client.getMessages());
await step("getLastAssistantText", "get_last_assistant_text", () => client.getLastAssistantText());
await step("getSessionStats", "get_session_stats", () => client.getSessionStats());
await step("getEntries", "get_entries", () => client.getEntries());
await step("getTree", "get_tree", () => client.getTree());
const forkable = await step("getForkMessages", "get_fork_messages", () => client.getForkMessages());
await step("setSessionName", "set_session_name", () => client.setSessionName("conformance"));
await step("bash", "bash", () => client.bash("echo from-bash"));
await step("abortBash", "abort_bash", () => client.abortBash());
await step("abort", "abort", () => client.abort());
await step("abortRetry", "abort_retry", () => client.abortRetry());
// Idle steer/follow_up: pi queues them; clear_queue then hands them back.
await step("steer", "steer", () => client.steer("steer text"));
await step("followUp", "follow_up", () => client.followUp("follow-up text"));
await step("clearQueue", "clear_queue", () => client.clearQueue());
await step("exportHtml", "export_html", () => client.exportHtml(config.exportPath));
await step("compact", "compact", () => client.compact("keep it short"));
const [provider, modelId] = config.setModel;
await step("setModel", "set_model", () => client.setModel(provider, modelId));
await step("cycleModel", "cycle_model", () => client.cycleModel());
const firstUser = Array.isArray(forkable.result) && forkable.result.length ? forkable.result[0].entryId : "missing";
// clone before fork: pi refuses to clone the unsaved session a fork leaves behind.
await step("clone", "clone", () => client.clone());
await step("fork", "fork", () => client.fork(firstUser));
const sessionFile = state.result && typeof state.result === "object" ? state.result.sessionFile : undefined;
await step("newSession", "new_session", () => client.newSession());
await step("switchSession", "switch_session", () => client.switchSession(sessionFile ?? join(config.workDir, "missing.jsonl")));
await step("stop", null, () => client.stop());
report({ method: "(done)", command: null, ok: true });
process.exit(0);
