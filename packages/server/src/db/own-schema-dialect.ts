import {
  DEFAULT_MIGRATION_LOCK_TABLE,
  DEFAULT_MIGRATION_TABLE,
  PostgresDialect,
  PostgresIntrospector,
  sql,
  type DatabaseIntrospector,
  type DatabaseMetadata,
  type DatabaseMetadataOptions,
  type Kysely,
  type SchemaMetadata,
  type TableMetadata,
} from 'kysely';

/**
 * PostgreSQL as Kysely speaks it, except that introspection sees only the connection's own schema
 * (the first of its search_path). Kysely's introspector lists every table of every schema and calls
 * pg_get_serial_sequence on each: the migrator's "do my tables exist" then fails with `schema ...
 * does not exist` when another install sharing the database drops its schema at that moment (test
 * suites do, in parallel), and slows with every schema the database holds.
 */
export class OwnSchemaPostgresDialect extends PostgresDialect {
  override createIntrospector(db: Kysely<unknown>): DatabaseIntrospector {
    return new OwnSchemaIntrospector(db);
  }
}

interface ColumnRow {
  table: string;
  kind: string;
  schema: string;
  column: string;
  type: string;
  type_schema: string;
  not_null: boolean;
  has_default: boolean;
  identity: string;
  serial: string | null;
}

class OwnSchemaIntrospector implements DatabaseIntrospector {
  constructor(private readonly db: Kysely<unknown>) {}

  getSchemas(): Promise<SchemaMetadata[]> {
    return new PostgresIntrospector(this.db).getSchemas();
  }

  async getTables(options: DatabaseMetadataOptions = { withInternalKyselyTables: false }): Promise<TableMetadata[]> {
    // Every catalog row is filtered by the namespace's oid before any function reads it.
    const { rows } = await sql<ColumnRow>`
      select c.relname as table, c.relkind as kind, ns.nspname as schema, a.attname as column,
             format_type(a.atttypid, null) as type, tns.nspname as type_schema,
             a.attnotnull as not_null, a.atthasdef as has_default, a.attidentity as identity,
             pg_get_serial_sequence(quote_ident(ns.nspname) || '.' || quote_ident(c.relname), a.attname) as serial
        from pg_catalog.pg_class c
        join pg_catalog.pg_namespace ns on ns.oid = c.relnamespace
        join pg_catalog.pg_attribute a on a.attrelid = c.oid
        join pg_catalog.pg_type t on t.oid = a.atttypid
        join pg_catalog.pg_namespace tns on tns.oid = t.typnamespace
       where ns.oid = (select oid from pg_catalog.pg_namespace where nspname = current_schema())
         and c.relkind in ('r', 'v', 'm', 'p') and a.attnum > 0 and not a.attisdropped
       order by c.relname, a.attnum`.execute(this.db);
    const tables = new Map<string, { name: string; schema: string; isView: boolean; columns: TableMetadata['columns'][number][] }>();
    for (const r of rows) {
      if (!options.withInternalKyselyTables && (r.table === DEFAULT_MIGRATION_TABLE || r.table === DEFAULT_MIGRATION_LOCK_TABLE)) continue;
      let table = tables.get(r.table);
      if (!table) tables.set(r.table, (table = { name: r.table, schema: r.schema, isView: r.kind === 'v' || r.kind === 'm', columns: [] }));
      table.columns.push({
        name: r.column,
        dataType: r.type,
        dataTypeSchema: r.type_schema,
        isNullable: !r.not_null,
        hasDefaultValue: r.has_default,
        isAutoIncrementing: r.identity !== '' || r.serial !== null,
      });
    }
    return [...tables.values()];
  }

  async getMetadata(options?: DatabaseMetadataOptions): Promise<DatabaseMetadata> {
    return { tables: await this.getTables(options) };
  }
}
