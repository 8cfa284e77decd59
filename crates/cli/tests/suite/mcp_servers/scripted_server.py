"""A scripted MCP server on stdio for the MCP client's fault tests (python3, no dependencies).

Behaviour comes from the environment:
  MCP_TOOLS=N        offer N tools `tool_0` .. (each echoes its `text`), besides the fixed ones
  MCP_HANG_START=1   never answer `initialize`
  MCP_BAD_SCHEMA=1   also offer `broken`, whose input schema is not an object schema
Fixed tools: `echo` (read-only), `crash` (exits at once, status 3), `flood` (answers with
MCP_FLOOD_MIB MiB of text, default 100), `change` (announces a changed tool list, which then
holds `added` too), `sleep` (never answers), `where` (its working directory, its environment).
Each start appends a line to $MCP_STARTS when set.
"""

import json
import os
import sys

if os.environ.get("MCP_STARTS"):
    with open(os.environ["MCP_STARTS"], "a") as f:
        f.write("start\n")

changed = False


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tool(name, description, read_only=False):
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": read_only},
    }


def tools():
    listed = [
        tool("echo", "Echo the text back", read_only=True),
        tool("crash", "Exit at once"),
        tool("flood", "Answer with a huge text"),
        tool("change", "Change the tool list"),
        tool("sleep", "Never answer"),
        tool("where", "Say where it runs and what it sees", read_only=True),
    ]
    for i in range(int(os.environ.get("MCP_TOOLS", "0"))):
        listed.append(tool(f"tool_{i}", f"Numbered tool {i} of the scripted server"))
    if os.environ.get("MCP_BAD_SCHEMA"):
        listed.append({"name": "broken", "description": "x", "inputSchema": {"type": "string"}})
    if changed:
        listed.append(tool("added", "Added by a change", read_only=True))
    return listed


def text(result, is_error=False):
    return {"content": [{"type": "text", "text": result}], "isError": is_error}


for line in sys.stdin:
    try:
        request = json.loads(line)
    except ValueError:
        continue
    method = request.get("method")
    ident = request.get("id")
    if method == "initialize":
        if os.environ.get("MCP_HANG_START"):
            continue
        send({
            "jsonrpc": "2.0",
            "id": ident,
            "result": {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "scripted", "version": "1"},
            },
        })
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
    elif method == "tools/call":
        name = request["params"]["name"]
        args = request["params"].get("arguments") or {}
        if name == "crash":
            sys.exit(3)
        elif name == "sleep":
            continue
        elif name == "flood":
            mib = int(os.environ.get("MCP_FLOOD_MIB", "100"))
            chunk = "x" * (1024 * 1024)
            head = '{"jsonrpc":"2.0","id":' + json.dumps(ident) + ',"result":{"content":[{"type":"text","text":"'
            sys.stdout.write(head)
            for _ in range(mib):
                sys.stdout.write(chunk)
            sys.stdout.write('"}]}}\n')
            sys.stdout.flush()
        elif name == "change":
            changed = True
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": ident, "result": text("changed")})
        elif name == "where":
            env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()))
            send({"jsonrpc": "2.0", "id": ident, "result": text(f"cwd={os.getcwd()} env: {env}")})
        else:
            send({"jsonrpc": "2.0", "id": ident, "result": text(f"{name}: {args.get('text', '')}")})
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
