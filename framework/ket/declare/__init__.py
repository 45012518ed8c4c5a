"""Declarations: what users write in their module files, kept as written for `ket check`."""

from ket.declare.deployment import DeploymentDecl, define_deployment
from ket.declare.effect import Effect, parse_effect
from ket.declare.function import FunctionDecl, define_function
from ket.declare.input import build_input_model
from ket.declare.job import JobDecl, default_backoff_seconds, define_job
from ket.declare.model import ModelDecl, define_model
from ket.declare.module import ModuleDecl, define_module
from ket.declare.operation import OperationDecl
from ket.declare.source import SourceLocation
from ket.declare.worker import WorkerConfig

__all__ = [
    "DeploymentDecl",
    "Effect",
    "FunctionDecl",
    "JobDecl",
    "ModelDecl",
    "ModuleDecl",
    "OperationDecl",
    "SourceLocation",
    "WorkerConfig",
    "build_input_model",
    "default_backoff_seconds",
    "define_deployment",
    "define_function",
    "define_job",
    "define_model",
    "define_module",
    "parse_effect",
]
