"""apply_patch as clients meet it: the MCP SDK's client over `corral serve`, and a
person running `corral call apply_patch` with a patch a model wrote."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp.client.session import ClientSession

from corral import CorralError, Sandbox
from corral.tools.responses_patch import call_output, patch_arguments
from tests.helpers.mcp_helpers import REPO, error_code, run_session, structured, write_config
from tests.helpers.patch_helpers import AFTER, DELETES, PATCH, build, files_of

# What a model writes: several files, @@ scopes, three lines of context, an added
# function and a changed call site, a new test file.
MODEL_TREE = {
    "shop/cart.py": (
        b"class Cart:\n"
        b"    def __init__(self):\n"
        b"        self.items = []\n"
        b"\n"
        b"    def add(self, item, price):\n"
        b"        self.items.append((item, price))\n"
        b"\n"
        b"    def total(self):\n"
        b"        return sum(price for _, price in self.items)\n"
    ),
    "shop/checkout.py": (
        b"from shop.cart import Cart\n"
        b"\n"
        b"\n"
        b"def checkout(cart: Cart) -> str:\n"
        b"    amount = cart.total()\n"
        b"    return f\"Pay {amount}\"\n"
    ),
}
MODEL_PATCH = """*** Begin Patch
*** Update File: shop/cart.py
@@ class Cart:
@@     def total(self):
-        return sum(price for _, price in self.items)
+        return round(sum(price for _, price in self.items), 2)
+
+    def count(self):
+        return len(self.items)
*** Update File: shop/checkout.py
@@ def checkout(cart: Cart) -> str:
     amount = cart.total()
-    return f"Pay {amount}"
+    return f"Pay {amount} for {cart.count()} items"
*** Add File: tests/test_cart.py
+from shop.cart import Cart
+
+
+def test_count():
+    cart = Cart()
+    cart.add("pen", 1.5)
+    assert cart.count() == 1
*** End Patch
"""


def test_apply_patch_over_mcp(tmp_path: Path, ws: Path) -> None:
    build(ws)
    extra = write_config(tmp_path, '[tools]\ndelete_file = "allow"\n')

    async def body(session: ClientSession) -> None:
        listed = await session.list_tools()
        tool = next(tool for tool in listed.tools if tool.name == "apply_patch")
        assert tool.title and tool.annotations and tool.annotations.destructive_hint
        assert set(tool.input_schema["properties"]) == {"patch", "dry_run", "match"}
        dry = await session.call_tool("apply_patch", {"patch": PATCH, "dry_run": True})
        assert not dry.is_error and "+++ b/src/util.py" in structured(dry)["diff"]
        miss = await session.call_tool("apply_patch", {
            "patch": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-nothing like it\n"
                     "+x\n*** End Patch"})
        assert error_code(miss) in ("no_match", "not_found")
        applied = await session.call_tool("apply_patch", {"patch": PATCH})
        assert not applied.is_error, applied
        assert [f["action"] for f in structured(applied)["files"]] == [
            "add", "update", "delete", "move"]
        assert "Applied the patch to 4 files" in applied.content[0].text  # type: ignore[union-attr]

    run_session(ws, body, extra=extra)
    assert files_of(ws) == AFTER


def test_a_model_written_patch_through_corral_call(ws: Path) -> None:
    build(ws, MODEL_TREE)
    proc = subprocess.run(  # the `corral` on PATH, as a person runs it
        ["corral", "call", "--workspace", str(ws), "apply_patch",
         json.dumps({"patch": MODEL_PATCH})],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=ws,
        timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Applied the patch to 3 files" in proc.stdout
    cart = (ws / "shop/cart.py").read_text()
    assert "return round(sum(price for _, price in self.items), 2)" in cart
    assert cart.endswith("    def count(self):\n        return len(self.items)\n")
    assert 'return f"Pay {amount} for {cart.count()} items"' in (
        ws / "shop/checkout.py").read_text()
    assert (ws / "tests/test_cart.py").read_text().startswith("from shop.cart import Cart\n")


def test_openai_responses_offers_the_native_tool_and_maps_its_calls(ws: Path) -> None:
    build(ws, MODEL_TREE)
    calls = [
        {"type": "apply_patch_call", "call_id": "c1", "status": "completed", "operation": {
            "type": "update_file", "path": "shop/checkout.py",
            "diff": "@@ def checkout(cart: Cart) -> str:\n     amount = cart.total()\n"
                    "-    return f\"Pay {amount}\"\n+    return f\"Total {amount}\"\n"}},
        {"type": "apply_patch_call", "call_id": "c2", "status": "completed", "operation": {
            "type": "create_file", "path": "README.md", "diff": "+# Shop\n\n+A cart.\n"}},
        {"type": "apply_patch_call", "call_id": "c3", "status": "completed", "operation": {
            "type": "delete_file", "path": "shop/cart.py"}},
    ]
    with Sandbox(ws, policy=DELETES) as sb:
        assert {"type": "apply_patch"} in sb.tools(format="openai-responses")
        outputs = [call_output(call, sb.call("apply_patch", patch_arguments(call)))
                   for call in calls]
        missing = {"type": "apply_patch_call", "call_id": "c4", "operation": {
            "type": "update_file", "path": "nope.py", "diff": "-x\n+y\n"}}
        failed = call_output(missing, sb.call("apply_patch", patch_arguments(missing)))
    assert [o["status"] for o in outputs] == ["completed"] * 3
    assert outputs[0] == {"type": "apply_patch_call_output", "call_id": "c1",
                          "status": "completed", "output": outputs[0]["output"]}
    assert (failed["status"], failed["call_id"]) == ("failed", "c4")
    assert "nope.py" in failed["output"]
    assert (ws / "README.md").read_text() == "# Shop\n\nA cart.\n"
    assert 'return f"Total {amount}"' in (ws / "shop/checkout.py").read_text()
    assert not (ws / "shop/cart.py").exists()
    with pytest.raises(CorralError):
        patch_arguments({"operation": {"type": "rename_file", "path": "a"}})
