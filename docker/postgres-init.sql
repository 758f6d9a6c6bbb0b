-- Second database for the compose Postgres: POSTGRES_DB creates "airflow", this adds "mlflow".
-- Runs once, when the data volume is empty (docker-entrypoint-initdb.d), as POSTGRES_USER.
CREATE DATABASE mlflow;
