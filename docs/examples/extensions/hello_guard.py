"""A first extension: a tool_call guard, a tool and a command.

Run it offline with the scripted model (see README.md, "Writing an extension").
"""

from pi_sandbox.sdk import block, text_result


def extension(pi):
    # 1. A guard: refuse `rm -rf` in bash commands before they run.
    def no_rm_rf(event, ctx):
        if event.tool_name == "bash" and "rm -rf" in event.input.get("command", ""):
            return block("hello_guard: rm -rf is not allowed here")
        return None  # let the call through

    pi.on("tool_call", no_rm_rf)

    # 2. A tool the model can call.
    def shout(params, ctx):
        return text_result(params["text"].upper() + "!", details={"length": len(params["text"])})

    pi.register_tool(
        name="shout",
        description="Repeat a piece of text in capital letters.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        execute=shout,
        prompt_snippet="shout: repeat text in capital letters",
    )

    # 3. A command: `/hello NAME` adds a message to the session without a model call.
    def hello(args, ctx):
        name = args or "world"
        pi.send_message({"custom_type": "hello", "content": f"Hello, {name}!"})
        ctx.ui.notify(f"said hello to {name}")

    pi.register_command("hello", hello, description="Say hello")
