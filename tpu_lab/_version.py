"""The version of tpu_lab (read by the build, the CLI and the doctor without importing the
package root)."""

__version__ = "0.1.0"
