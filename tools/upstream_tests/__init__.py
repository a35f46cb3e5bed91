"""Run test files of another project (TorchDynamo's own) plainly and under ``graphmend run``,
and list every test whose outcome differs between the two arms."""
