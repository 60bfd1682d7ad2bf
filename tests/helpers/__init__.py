"""What the tests share: fixtures stay in tests/conftest.py (pytest finds them), every
other shared piece is a module here, imported as `from tests.helpers.x import ...`.
The modules named template_* and tenant_probe are zygote entries that tests start
by name (`tests.helpers.template_probe`), not imported by the tests."""
