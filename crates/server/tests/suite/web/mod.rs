mod router;
mod supervisor;
