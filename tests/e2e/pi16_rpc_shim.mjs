// Stand-in for pi's dist/cli.js that runs another command, so pi 1.6.0's RpcClient
// (which spawns `node CLIPATH --mode rpc ...`) can drive pi-sandbox (issue 17 §3).
//
// The command is the JSON list in $PI_RPC_SHIM_ARGV; RpcClient's arguments are
// appended. stdio is inherited (the JSONL protocol passes straight through), SIGTERM
// and SIGINT are forwarded, and the shim exits with the command's status.
import { spawn } from "node:child_process";

const argv = JSON.parse(process.env.PI_RPC_SHIM_ARGV ?? "null");
if (!Array.isArray(argv) || argv.length === 0) {
  process.stderr.write("pi16_rpc_shim: set PI_RPC_SHIM_ARGV to a JSON list (the command)\n");
  process.exit(2);
}
const child = spawn(argv[0], [...argv.slice(1), ...process.argv.slice(2)], { stdio: "inherit" });
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(signal, () => child.kill(signal));
child.on("error", (error) => {
  process.stderr.write(`pi16_rpc_shim: cannot start ${argv[0]}: ${error.message}\n`);
  process.exit(127);
});
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 128 : 1)));
